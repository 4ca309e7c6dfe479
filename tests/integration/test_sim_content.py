"""The simulated server reads a request's content: multi-turn chat on code is classified as code,
accepts what ``sim truth --content code`` says it accepts, and its prompt is counted turn by turn.

One real server process (DFLASH, block 8, no restart jitter, real-time steps) and a small
closed loop of multi-turn chat requests whose code turn is cut so that every prompt is exactly
``CONTEXT`` tokens after the template. The loop measures as a sweep's point does: all output
tokens over the wall time from the first send to the last end; accept len from the server's
own per-request truth (decode tokens over verify steps, as the truth's replay counts them).
The tolerances are those of ``test_sim_truth`` (see its docstring).
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from orchestrator.bench.prompts import build_prompt
from orchestrator.sim.content import ContentClass, classify_turns
from orchestrator.sim.perfmodel import PerfParams
from orchestrator.sim.server_args import build_parser, resolve
from orchestrator.sim.tokenizer import template_tokens, tokenize
from orchestrator.sim.truth import CellModel, cell_truth
from tests.integration.sim_server_proc import SimServer, start_server
from tests.integration.test_sim_truth import TURNAROUND_S, Z, throughput_bounds

FLAGS = [
    "--model-path", "org/big-model", "--served-model-name", "m",
    "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "org/dflash",
    "--speculative-num-draft-tokens", "8",
]
SETTINGS = {"time_scale": 1.0, "load_s": 0.2, "warmup_s": 0.1, "restart_jitter": 0}
CONTEXT, CONCURRENCY, ROUNDS, MAX_TOKENS = 512, 4, 3, 160
CODE_TOKENS = tokenize(Path(textwrap.__file__).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    proc = start_server(tmp_path_factory.mktemp("sim-content"), FLAGS, SETTINGS, name="content")
    try:
        proc.wait_ready_blocking(timeout=30.0)
        yield proc
    finally:
        proc.stop()


def code_conversation(index: int, context: int) -> list[dict[str, str]]:
    """System, user (code cut to fit), assistant, user: exactly ``context`` templated tokens."""
    turns = [
        ("system", f"Request {index}. You review Python code."),
        ("user", ""),
        ("assistant", "I have read the module."),
        ("user", "What does dedent return for an empty string?"),
    ]
    fixed = len(template_tokens((role, tokenize(text)) for role, text in turns))
    code = "".join(CODE_TOKENS[: context - fixed])
    turns[1] = ("user", code)
    assert len(template_tokens((role, tokenize(text)) for role, text in turns)) == context
    return [{"role": role, "content": text} for role, text in turns]


async def chat(session: aiohttp.ClientSession, url: str, messages: list[dict[str, str]],
               max_tokens: int) -> dict[str, Any]:
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        data: dict[str, Any] = await resp.json()
        return data


async def request_truth(session: aiohttp.ClientSession, url: str,
                        ids: list[str]) -> list[dict[str, Any]]:
    async with session.get(f"{url}/sim/requests", params={"ids": ",".join(ids)}) as resp:
        rows: list[dict[str, Any]] = await resp.json()
        return rows


async def test_multi_turn_prompts_are_counted_and_classified_from_every_turn(
    server: SimServer,
) -> None:
    prose = [{"role": "system", "content": "You are a friendly travel guide."},
             {"role": "user", "content": "Hello! Where should I go in May?"},
             {"role": "assistant", "content": "Portugal, perhaps. Do you like the sea?"},
             {"role": "user", "content": "Yes, very much. And good food, too."}]
    plain = [{"role": "user", "content": build_prompt(12345, 300)}]
    code = code_conversation(0, 300)
    async with aiohttp.ClientSession() as session:
        answers = [await chat(session, server.url, m, 1) for m in (prose, plain, code)]
        rows = await request_truth(session, server.url, [a["id"] for a in answers])
    expected = [sum(4 + len(tokenize(m["content"])) for m in ms) + 3
                for ms in (prose, plain, code)]
    assert [a["usage"]["prompt_tokens"] for a in answers] == expected
    by_id = {row["id"]: row for row in rows}
    assert [by_id[a["id"]]["content"] for a in answers] == ["prose", "plain", "code"]
    # What the truth reads a workload's classes with says the same as the server.
    assert [classify_turns(m["content"] for m in ms).value for ms in (prose, plain, code)] == [
        "prose", "plain", "code"]


async def test_a_code_workload_measures_what_the_truth_says_for_code(server: SimServer) -> None:
    conversations = [code_conversation(i + 1, CONTEXT) for i in range(CONCURRENCY * ROUNDS)]
    assert classify_turns(m["content"] for m in conversations[0]) is ContentClass.CODE
    queue = list(conversations)
    ends: list[float] = []
    answers: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            while queue:
                answers.append(await chat(session, server.url, queue.pop(0), MAX_TOKENS))
                ends.append(time.monotonic())

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        rows = await request_truth(session, server.url, [a["id"] for a in answers])
    assert all(a["usage"]["prompt_tokens"] == CONTEXT for a in answers)
    assert {row["content"] for row in rows} == {"code"}
    tokens = sum(a["usage"]["completion_tokens"] for a in answers)
    assert tokens == len(answers) * MAX_TOKENS
    output_tok_s = tokens / (max(ends) - started)
    accept = sum(r["completion_tokens"] - 1 for r in rows) / sum(r["verify_steps"] for r in rows)

    argv = FLAGS
    shape = resolve(build_parser("0.5.23", True).parse_args(argv), argv, version="0.5.23",
                    ddtree=True, environ={}).shape

    def truth(content: ContentClass, turnaround_ms: float = 0.0) -> Any:
        model = CellModel(shape, PerfParams(), CONTEXT, CONCURRENCY, ROUNDS, MAX_TOKENS, True,
                          48, turnaround_ms=turnaround_ms, content=(content,))
        return cell_truth(model, time_scale=1.0, replications=64)

    code, plain = truth(ContentClass.CODE), truth(ContentClass.PLAIN)
    low, high = throughput_bounds(code, truth(ContentClass.CODE, 1000.0 * TURNAROUND_S))
    assert low <= output_tok_s <= high, (output_tok_s, code)
    assert abs(accept - code.accept_len) <= Z * code.accept_len_sd, (accept, code)
    # The content made the difference: closer to code's truth than to plain text's (about 4
    # standard deviations of one measurement from either).
    assert accept > (code.accept_len + plain.accept_len) / 2, (accept, plain)
