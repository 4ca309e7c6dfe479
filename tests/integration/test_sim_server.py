"""The simulated SGLang server over real HTTP, as a real subprocess, against FACTS.md's formats."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.sim_server_proc import SimServer, run_to_exit, start_server

DFLASH_FLAGS = [
    "--model-path",
    "moonshotai/Kimi-K2.6",
    "--tp",
    "8",
    "--speculative-algorithm",
    "DFLASH",
    "--speculative-draft-model-path",
    "z-lab/dflash",
    "--speculative-draft-window-size",
    "2048",
    "--reasoning-parser",
    "kimi_k2",
    "--enable-metrics",
    "--decode-log-interval",
    "4",
]
CODING_PROMPT = "Write a Python function `gcd(a, b)` that returns the greatest common divisor."

PREFIX_MS_TP = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} TP\d+\] "
PREFIX_PLAIN = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] "
DECODE_SPEC = re.compile(
    r"Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d{2}, "
    r"accept len: (\d+\.\d{2}), accept rate: \d+\.\d{2}, cuda graph: (True|False), "
    r"gen throughput \(token/s\): \d+\.\d{2}, #queue-req: \d+$"
)
DECODE_BASE = re.compile(
    r"Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d{2}, "
    r"cuda graph: (True|False), gen throughput \(token/s\): \d+\.\d{2}, #queue-req: \d+$"
)
PREFILL = re.compile(
    r"Prefill batch, #new-seq: \d+, #new-token: \d+, #cached-token: \d+, token usage: "
    r"\d+\.\d{2}, #running-req: \d+, #queue-req: \d+, #pending-token: \d+, cuda graph: "
    r"(True|False), input throughput \(token/s\): \d+\.\d{2}$"
)


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("simserver")


@pytest.fixture(scope="module")
def dflash_server(module_tmp: Path) -> Iterator[SimServer]:
    """One DFLASH + kimi_k2 parser server (TP 8, ms logs, metrics) shared by read-only tests."""
    server = start_server(
        module_tmp,
        DFLASH_FLAGS,
        {"gpu_state_dir": str(module_tmp / "gpu")},
        env={"SGLANG_LOG_MS": "1", "CUDA_VISIBLE_DEVICES": "4,5,6,7,0,1,2,3"},
        name="dflash",
    )
    try:
        server.wait_ready_blocking()
        yield server
    finally:
        server.stop()


async def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        data: dict[str, Any] = await resp.json()
        return data


async def _get(url: str) -> Any:
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def _sse_lines(url: str, body: dict[str, Any]) -> list[str]:
    """Raw SSE payload lines (``data: ...``) of a streamed POST."""
    lines: list[str] = []
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if line:
                lines.append(line)
    return lines


# --- command line --------------------------------------------------------------------------


def test_unknown_flag_exits_2_with_argparse_message(tmp_path: Path) -> None:
    code, out = run_to_exit(tmp_path, ["--model-path", "m", "--bogus-flag", "3"])
    assert code == 2
    assert "error: unrecognized arguments: --bogus-flag 3" in out


@pytest.mark.parametrize(
    ("version", "flag", "parses"),
    [
        ("0.5.11", "--speculative-dflash-draft-window-size", True),
        ("0.5.11", "--speculative-draft-window-size", False),
        ("0.5.15", "--speculative-dflash-draft-window-size", True),
        ("0.5.15", "--speculative-draft-window-size", True),
        ("0.5.23", "--speculative-dflash-draft-window-size", False),
        ("0.5.23", "--speculative-draft-window-size", True),
    ],
)
def test_window_flag_spelling_by_version(
    tmp_path: Path, version: str, flag: str, parses: bool
) -> None:
    # A window smaller than the block makes a parsed config fail with exit 1, so exit code 2
    # vs 1 tells "flag unknown to this build" from "flag accepted".
    flags = [
        "--model-path",
        "m",
        "--speculative-algorithm",
        "dflash",
        "--speculative-draft-model-path",
        "d",
        flag,
        "8",
    ]
    code, out = run_to_exit(tmp_path, flags, {"sglang_version": version})
    if parses:
        assert code == 1, out
        assert "ValueError" in out
    else:
        assert code == 2, out
        assert f"unrecognized arguments: {flag} 8" in out


def test_dflash_window_below_block_is_value_error(tmp_path: Path) -> None:
    flags = [
        "--model-path",
        "m",
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-draft-model-path",
        "d",
        "--speculative-num-draft-tokens",
        "16",
        "--speculative-draft-window-size",
        "8",
    ]
    code, out = run_to_exit(tmp_path, flags)
    assert code == 1
    assert "Traceback (most recent call last):" in out
    assert re.search(
        r"^ValueError: --speculative-draft-window-size must be >= --speculative-num-draft-tokens"
        r" \(block_size\)\. window_size=8, block_size=16\.$",
        out,
        re.M,
    )


def test_unknown_algorithm_and_ddtree_without_the_fork(tmp_path: Path) -> None:
    code, out = run_to_exit(tmp_path, ["--model-path", "m", "--speculative-algorithm", "foo"])
    assert code == 1
    assert "ValueError: Unknown speculative algorithm name: foo" in out
    flags = [
        "--model-path",
        "m",
        "--speculative-algorithm",
        "DDTREE",
        "--speculative-draft-model-path",
        "d",
    ]
    code, out = run_to_exit(tmp_path, flags, {"ddtree": False})
    assert code == 1 and "Unknown speculative algorithm name: DDTREE" in out
    code, out = run_to_exit(
        tmp_path, [*flags, "--speculative-ddtree-budget", "8"], {"ddtree": False}
    )
    assert code == 2 and "unrecognized arguments: --speculative-ddtree-budget 8" in out


# --- load phase and logs -------------------------------------------------------------------


async def test_models_answer_during_warmup_while_health_is_503(tmp_path: Path) -> None:
    # Since issue 14 the port opens only after the load, so the window where /v1/models
    # answers and /health is 503 is the warm-up (1.2 s wall here), not the load.
    server = start_server(tmp_path, ["--model-path", "m"], {"warmup_s": 60.0})
    try:
        seen_loading = False
        deadline = time.monotonic() + 10
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < deadline:
                try:
                    async with (
                        s.get(f"{server.url}/v1/models") as models,
                        s.get(f"{server.url}/health") as health,
                        s.get(f"{server.url}/health_generate") as health_gen,
                    ):
                        if health.status == 200:
                            break
                        assert models.status == 200
                        assert (await models.json())["data"][0]["id"] == "m"
                        assert health.status == 503
                        if health_gen.status == 200:
                            # The warm-up ended between the two requests: the change is
                            # one-way, so /health must now agree.
                            async with s.get(f"{server.url}/health") as again:
                                assert again.status == 200
                            break
                        assert health_gen.status == 503
                        seen_loading = True
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
            assert seen_loading
            assert "The server is fired up and ready to roll!" in server.log()
            async with s.get(f"{server.url}/health_generate") as resp:
                assert resp.status == 200
    finally:
        server.stop()


async def test_log_lines_match_sglang_formats(dflash_server: SimServer) -> None:
    await _post(
        f"{dflash_server.url}/generate",
        {"text": "hello", "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}},
    )
    log = dflash_server.log().splitlines()
    ready = [ln for ln in log if ln.endswith("The server is fired up and ready to roll!")]
    assert len(ready) == 1
    assert re.match(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}\] The server", ready[0])
    decode = [ln for ln in log if "Decode batch" in ln]
    assert decode
    for line in decode:
        m = re.match(PREFIX_MS_TP + "(.*)$", line)
        assert m, line
        assert "TP0]" in line
        spec = DECODE_SPEC.match(m.group(1))
        assert spec, line
        assert 1.0 <= float(spec.group(1)) <= 16.0
    prefill = [ln for ln in log if "Prefill batch" in ln]
    assert prefill and all(PREFILL.match(re.sub(PREFIX_MS_TP, "", ln)) for ln in prefill)
    init = [ln for ln in log if "Initialized DFLASH draft runner." in ln]
    assert len(init) == 1
    assert init[0].endswith(
        "Initialized DFLASH draft runner. attention_backend=fa3, model=z-lab/dflash, "
        "block_size=16, draft_window_size=2048, compact_cache=True"
    )
    assert log.index(init[0]) < log.index(ready[0])


async def test_baseline_log_has_no_tp_tag_and_no_accept_len(tmp_path: Path) -> None:
    server = start_server(tmp_path, ["--model-path", "m", "--decode-log-interval", "2"])
    try:
        await server.wait_ready()
        data = await _post(
            f"{server.url}/generate",
            {"text": "hi", "sampling_params": {"max_new_tokens": 20, "ignore_eos": True}},
        )
        assert "spec_verify_ct" not in data["meta_info"]
        decode = [ln for ln in server.log().splitlines() if "Decode batch" in ln]
        assert decode
        for line in decode:
            m = re.match(PREFIX_PLAIN + "(.*)$", line)
            assert m and DECODE_BASE.match(m.group(1)), line
        info = await _get(f"{server.url}/server_info")
        assert "avg_spec_accept_length" not in info["internal_states"][0]
    finally:
        server.stop()


# --- HTTP API shapes -----------------------------------------------------------------------


async def test_chat_stream_shape_line_by_line(dflash_server: SimServer) -> None:
    body = {
        "model": "x",
        "messages": [{"role": "user", "content": CODING_PROMPT}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 4000,
        "temperature": 0,
    }
    lines = await _sse_lines(f"{dflash_server.url}/v1/chat/completions", body)
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(ln.removeprefix("data: ")) for ln in lines[:-1]]
    assert all(ln.startswith("data: ") for ln in lines)
    ids = {e["id"] for e in events}
    assert len(ids) == 1
    usage_event = events[-1]
    assert usage_event["choices"] == []
    usage = usage_event["usage"]
    assert usage["completion_tokens"] > 0 and usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    finish_event = events[-2]
    assert finish_event["choices"][0]["finish_reason"] == "stop"
    reasoning, content = "", ""
    for event in events[:-1]:
        assert event["object"] == "chat.completion.chunk"
        (choice,) = event["choices"]
        delta = choice["delta"]
        assert "reasoning_content" in delta
        assert delta["reasoning_content"] is None or isinstance(delta["reasoning_content"], str)
        reasoning += delta["reasoning_content"] or ""
        content += delta.get("content") or ""
        if event is not finish_event:
            assert choice["finish_reason"] is None
            assert event["usage"] is None
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "```python" in reasoning and "</think>" not in reasoning
    assert "<think>" not in content and "def gcd(" in content
    truth = await _get(f"{dflash_server.url}/sim/requests?ids={events[0]['id']}")
    (record,) = truth
    assert record["completion_tokens"] == usage["completion_tokens"]
    assert sum(n for _, n in record["chunks"]) == usage["completion_tokens"]
    assert record["prompt_tokens"] == usage["prompt_tokens"]
    assert record["finish_reason"] == "stop"
    assert max(n for _, n in record["chunks"]) > 1, "speculative chunks carry several tokens"
    times = [t for t, _ in record["chunks"]]
    assert times == sorted(times) and record["first_emit_monotonic"] == times[0]
    assert record["arrival_monotonic"] <= times[0] <= time.monotonic()


async def test_generate_meta_info_and_cumulative_stream(dflash_server: SimServer) -> None:
    body = {
        "text": "Tell me about GPUs.",
        "stream": True,
        "sampling_params": {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0},
    }
    lines = await _sse_lines(f"{dflash_server.url}/generate", body)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln.removeprefix("data: ")) for ln in lines[:-1]]
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))
    for c in chunks[:-1]:
        assert c["meta_info"]["finish_reason"] is None
        assert "spec_verify_ct" not in c["meta_info"]
    meta = chunks[-1]["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 64}
    assert meta["completion_tokens"] == 64
    assert meta["prompt_tokens"] > 0 and meta["cached_tokens"] >= 0 and meta["e2e_latency"] > 0
    assert meta["spec_verify_ct"] >= 1
    assert meta["spec_accept_length"] == pytest.approx(64 / meta["spec_verify_ct"])
    assert 0.0 <= meta["spec_accept_rate"] <= 1.0
    whole = await _post(f"{dflash_server.url}/generate", {**body, "stream": False})
    assert whole["text"] == texts[-1], "temperature 0 is deterministic"


async def test_truncated_reasoning_is_all_reasoning_content(dflash_server: SimServer) -> None:
    body = {
        "messages": [{"role": "user", "content": CODING_PROMPT}],
        "max_tokens": 40,
        "temperature": 0,
    }
    data = await _post(f"{dflash_server.url}/v1/chat/completions", body)
    (choice,) = data["choices"]
    assert choice["finish_reason"] == "length"
    assert not choice["message"]["content"]
    assert choice["message"]["reasoning_content"]
    assert data["usage"]["completion_tokens"] == 40


async def test_openai_client_streams_reasoning_and_usage(dflash_server: SimServer) -> None:
    openai = pytest.importorskip("openai")
    client = openai.AsyncOpenAI(base_url=f"{dflash_server.url}/v1", api_key="none")
    try:
        stream = await client.chat.completions.create(
            model="moonshotai/Kimi-K2.6",
            messages=[{"role": "user", "content": CODING_PROMPT}],
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=3000,
            temperature=0,
        )
        reasoning, content, usage, finish = "", "", None, None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                extra = choice.delta.model_extra or {}
                reasoning += extra.get("reasoning_content") or ""
                content += choice.delta.content or ""
                finish = choice.finish_reason or finish
    finally:
        await client.close()
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens > 0
    assert "```python" in reasoning
    assert "def gcd(" in content


async def test_server_info_flush_cache_and_metrics(dflash_server: SimServer) -> None:
    url = dflash_server.url
    await _post(f"{url}/generate", {"text": "x", "sampling_params": {"max_new_tokens": 30}})
    info = await _get(f"{url}/server_info")
    assert info["speculative_algorithm"] == "DFLASH"
    assert info["speculative_num_steps"] == 1 and info["speculative_eagle_topk"] == 1
    assert info["speculative_num_draft_tokens"] == 16
    assert info["speculative_draft_window_size"] == 2048
    assert info["tp_size"] == 8 and info["version"] == "0.5.23"
    assert "orchestrator.sim.sglang_server" in info["launch_command"]
    assert "--speculative-draft-window-size 2048" in info["launch_command"]
    assert info["startup_time"] <= time.time()
    assert info["internal_states"][0]["avg_spec_accept_length"] >= 1.0
    assert (await _get(f"{url}/get_server_info"))["tp_size"] == 8
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{url}/flush_cache") as resp:
            assert resp.status == 200
        async with s.get(f"{url}/metrics") as resp:
            text = await resp.text()
    assert "avg_spec_accept_length" not in (await _get(f"{url}/server_info"))["internal_states"][0]
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name.split("{")[0]] = float(value)
    assert values["sglang:spec_accept_length"] >= 1.0
    assert values["sglang:spec_verify_calls_total"] > 0
    assert values["sglang:generation_tokens_total"] >= 30
    assert values["sglang:prompt_tokens_total"] > 0
    truth = await _get(f"{url}/sim/truth")
    assert truth["accepted_tokens"] >= truth["verify_steps"] > 0
    assert truth["spec"]["algorithm"] == "DFLASH"


async def test_gpu_registration_file(dflash_server: SimServer, module_tmp: Path) -> None:
    path = module_tmp / "gpu" / f"{dflash_server.proc.pid}.json"
    data = json.loads(path.read_text())
    assert data["pid"] == dflash_server.proc.pid
    assert data["gpus"] == [4, 5, 6, 7, 0, 1, 2, 3]
    assert data["used_mib"] == 80000
    assert data["started"] <= time.time()


async def test_outputs_identical_across_speculative_configs(
    dflash_server: SimServer, tmp_path: Path
) -> None:
    base = start_server(tmp_path, ["--model-path", "m", "--reasoning-parser", "kimi_k2"])
    try:
        await base.wait_ready()
        body = {
            "messages": [{"role": "user", "content": CODING_PROMPT}],
            "max_tokens": 3000,
            "temperature": 0,
        }
        a = await _post(f"{base.url}/v1/chat/completions", body)
        b = await _post(f"{dflash_server.url}/v1/chat/completions", body)
        assert a["choices"][0]["message"] == b["choices"][0]["message"]
        assert a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"]
    finally:
        base.stop()


# --- faults --------------------------------------------------------------------------------


def test_crash_at_start_oom_registers_memory_then_dies(tmp_path: Path) -> None:
    settings = {
        "gpu_state_dir": str(tmp_path / "gpu"),
        "faults": {"crash_at_start": {"value": "oom", "when_args": ["--tp", "2"]}},
    }
    code, out = run_to_exit(tmp_path, ["--model-path", "m", "--tp", "2"], settings)
    assert code == 1
    assert "torch.OutOfMemoryError: CUDA out of memory." in out
    assert "fired up" not in out
    (reg,) = list((tmp_path / "gpu").glob("*.json"))
    assert json.loads(reg.read_text())["gpus"] == [0, 1]


async def test_crash_at_start_when_args_not_matching_does_not_fire(tmp_path: Path) -> None:
    settings = {"faults": {"crash_at_start": {"value": "oom", "when_args": ["--tp", "2"]}}}
    server = start_server(tmp_path, ["--model-path", "m"], settings)
    try:
        await server.wait_ready()
    finally:
        server.stop()


async def test_crash_after_requests(tmp_path: Path) -> None:
    server = start_server(tmp_path, ["--model-path", "m"], {"faults": {"crash_after_requests": 2}})
    try:
        await server.wait_ready()
        body = {"text": "a", "sampling_params": {"max_new_tokens": 5}}
        await _post(f"{server.url}/generate", body)
        await _post(f"{server.url}/generate", body)
        assert server.wait_exit(10) == 1
        out = server.log()
        assert "Scheduler hit an exception: Traceback (most recent call last):" in out
        assert "RuntimeError: CUDA error: an illegal memory access was encountered" in out
    finally:
        server.stop()


async def test_hang_request_every(tmp_path: Path) -> None:
    server = start_server(tmp_path, ["--model-path", "m"], {"faults": {"hang_request_every": 2}})
    try:
        await server.wait_ready()
        body = {"text": "a", "sampling_params": {"max_new_tokens": 5}}
        await _post(f"{server.url}/generate", body)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(_post(f"{server.url}/generate", body), 1.0)
        third = await _post(f"{server.url}/generate", body)
        assert third["meta_info"]["completion_tokens"] == 5
    finally:
        server.stop()


async def test_ignore_sigterm_survives_until_sigkill(tmp_path: Path) -> None:
    server = start_server(tmp_path, ["--model-path", "m"], {"faults": {"ignore_sigterm": True}})
    try:
        await server.wait_ready()
        server.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.6)
        assert server.proc.poll() is None
        async with aiohttp.ClientSession() as s, s.get(f"{server.url}/health") as resp:
            assert resp.status == 200
        server.proc.send_signal(signal.SIGKILL)
        assert server.wait_exit(5) == -signal.SIGKILL
    finally:
        server.stop()


async def test_stop_delay_keeps_serving_after_sigterm(tmp_path: Path) -> None:
    server = start_server(tmp_path, ["--model-path", "m"], {"stop_delay_s": 50.0})  # 1 s
    try:
        await server.wait_ready()
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.2)
        data = await _post(
            f"{server.url}/generate", {"text": "a", "sampling_params": {"max_new_tokens": 3}}
        )
        assert data["meta_info"]["completion_tokens"] == 3
        assert await asyncio.to_thread(server.wait_exit, 10) == 0
        assert time.monotonic() - sent >= 0.9
    finally:
        server.stop()


async def test_leftover_child_holds_memory_after_main_exits(tmp_path: Path) -> None:
    gpu_dir = tmp_path / "gpu"
    settings = {"gpu_state_dir": str(gpu_dir), "faults": {"leftover_child_s": 40.0}}  # 0.8 s
    server = start_server(tmp_path, ["--model-path", "m"], settings)
    try:
        await server.wait_ready()
        (reg,) = list(gpu_dir.glob("*.json"))
        child = json.loads(reg.read_text())["pid"]
        assert child != server.proc.pid
        server.proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(server.wait_exit, 10) == 0
        os.kill(child, 0)  # still alive right after the main process exited
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            await asyncio.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            raise AssertionError("leftover child did not exit after its linger time")
    finally:
        server.stop()


async def test_concurrency_slows_each_step(tmp_path: Path) -> None:
    """One continuous-batching loop: 32 running requests make every step longer than 1 does."""
    flags = [
        "--model-path",
        "m",
        "--speculative-algorithm",
        "DFLASH",
        "--speculative-draft-model-path",
        "d",
        "--decode-log-interval",
        "5",
    ]
    server = start_server(tmp_path, flags, {"time_scale": 0.2, "warmup_s": 0.0})
    try:
        await server.wait_ready()
        body = {"text": "x", "sampling_params": {"max_new_tokens": 120, "ignore_eos": True}}

        async def step_ms(concurrency: int) -> float:
            results = await asyncio.gather(
                *[
                    _post(f"{server.url}/generate", {**body, "text": f"{concurrency} {i}"})
                    for i in range(concurrency)
                ]
            )
            ids = ",".join(r["meta_info"]["id"] for r in results)
            records = await _get(f"{server.url}/sim/requests?ids={ids}")
            assert len(records) == concurrency
            per_step: list[float] = [
                (r["chunks"][-1][0] - r["arrival_monotonic"]) / r["verify_steps"] for r in records
            ]
            return 1000.0 * sum(per_step) / len(per_step)

        alone = await step_ms(1)
        crowded = await step_ms(32)
        assert crowded > 1.4 * alone, (alone, crowded)
        assert re.search(r"Decode batch, #running-req: 32,", server.log())
    finally:
        server.stop()
