"""The simulated server as SGLang launches it (issue 14): the rank tags of its log prefixes
from the layout flags, the bind after the load, a finished request's speculative counters,
and the DDTree worker's defaults; each against the orchestrator's own parser."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from orchestrator.engines.base import DecodeEvent
from orchestrator.engines.sglang.engine import DdtreeInitEvent, DflashInitEvent, parse_log_line
from tests.integration.sim_server_proc import start_server

DFLASH = [
    "--model-path",
    "m",
    "--speculative-algorithm",
    "DFLASH",
    "--speculative-draft-model-path",
    "z-lab/dflash",
    "--speculative-num-draft-tokens",
    "8",
    "--decode-log-interval",
    "2",
]
LAYOUT = ["--tp-size", "8", "--attn-cp-size", "2", "--moe-dp-size", "2", "--ep-size", "4"]
STAMP = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"


def _tags(log: str, marker: str) -> list[str]:
    """The rank tags of every line holding ``marker``, in order."""
    return [
        found.group(1)
        for line in log.splitlines()
        if marker in line and (found := re.match(STAMP + r"((?: [A-Z_]+\d+)*)\] ", line))
    ]


async def _generate(url: str, max_new_tokens: int) -> dict[str, Any]:
    body = {
        "text": "Tell me about GPUs.",
        "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True},
    }
    async with aiohttp.ClientSession() as session, session.post(f"{url}/generate", json=body) as r:
        assert r.status == 200
        data: dict[str, Any] = await r.json()
        return data


async def test_layout_flags_give_sglangs_rank_tags_from_the_ranks_that_log(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path, [*DFLASH, *LAYOUT])
    try:
        await server.wait_ready()
        data = await _generate(server.url, 40)
        log = server.log()
    finally:
        server.stop()
    # Every scheduler process loads weights: attention is ATTN_CP -> ATTN_TP (4 ranks each),
    # MoE is MOE_DP -> EP (4 experts' groups of 1 TP rank each).
    assert _tags(log, "Load weight begin") == [
        f" ATTN_CP{t // 4} MOE_DP{t // 4} TP{t} EP{t % 4}" for t in range(8)
    ]
    # Only attention-TP rank 0 of each group logs the batches.
    decode = [line for line in log.splitlines() if "Decode batch" in line]
    assert decode and set(_tags(log, "Decode batch")) == {
        " ATTN_CP0 MOE_DP0 TP0 EP0",
        " ATTN_CP1 MOE_DP1 TP4 EP0",
    }
    for line in decode:
        event = parse_log_line(line)
        assert isinstance(event, DecodeEvent), line
        assert event.accept_len is not None and event.accept_len >= 1.0
        assert set(event.prefix.ranks) == {"ATTN_CP", "MOE_DP", "TP", "EP"}
    # The worker's init line comes from global TP rank 0 only.
    assert _tags(log, "Initialized DFLASH draft runner.") == [" ATTN_CP0 MOE_DP0 TP0 EP0"]
    assert data["meta_info"]["spec_verify_ct"] > 0


async def test_finished_generate_carries_sglangs_speculative_counters(tmp_path: Path) -> None:
    server = start_server(tmp_path, DFLASH)
    try:
        await server.wait_ready()
        # 37 tokens from 8-token blocks: the last verify step is cut by max_new_tokens.
        meta = (await _generate(server.url, 37))["meta_info"]
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{server.url}/sim/requests?ids={meta['id']}") as r,
        ):
            (truth,) = await r.json()
    finally:
        server.stop()
    verify = meta["spec_verify_ct"]
    assert verify == truth["verify_steps"] > 0
    assert meta["spec_num_proposed_drafts"] == meta["spec_proposed_drafts"] == verify * 7
    correct = meta["spec_num_correct_drafts"]
    assert correct == meta["spec_accepted_drafts"]
    # DFLASH's verify counts the drafts it appended, up to the token that finished the request.
    assert correct + verify == 37 - 1
    assert meta["spec_accept_length"] == pytest.approx(37 / verify)
    assert meta["spec_accept_rate"] == pytest.approx(correct / (verify * 7))


async def test_nothing_answers_during_the_load_and_a_taken_port_fails_after_it(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path, ["--model-path", "m"], {"load_s": 30.0})  # 0.6 s wall
    try:
        refused = 0
        async with aiohttp.ClientSession() as session:
            while "Load weight end" not in server.log():
                with pytest.raises(aiohttp.ClientConnectionError):
                    async with session.get(f"{server.url}/v1/models"):
                        pass
                refused += 1
                await asyncio.sleep(0.05)
        assert refused > 5
        await server.wait_ready()
        lines = server.log().splitlines()
        bound = next(i for i, ln in enumerate(lines) if "Uvicorn running on" in ln)
        assert bound > next(i for i, ln in enumerate(lines) if "max_total_num_tokens=" in ln)
    finally:
        server.stop()

    # A port taken by another process fails only once the load is over, as uvicorn does.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        started = time.monotonic()
        code, out = _run_on_port(tmp_path, port)
        elapsed = time.monotonic() - started
    assert code == 1
    lines = out.splitlines()
    error = next(i for i, ln in enumerate(lines) if "[Errno 98]" in ln)
    assert lines[error] == (
        "ERROR:    [Errno 98] error while attempting to bind on address "
        f"('127.0.0.1', {port}): address already in use"
    )
    assert next(i for i, ln in enumerate(lines) if "Load weight end" in ln) < error
    assert elapsed > 0.5  # the load (30 s x time scale 0.02) came first


def _run_on_port(tmp_path: Path, port: int) -> tuple[int, str]:
    """The server on ``port`` (taken), run to its exit."""
    config = tmp_path / "port.json"
    config.write_text(json.dumps({"time_scale": 0.02, "load_s": 30.0, "warmup_s": 0.5}))
    log = tmp_path / "port.log"
    argv = [sys.executable, "-m", "orchestrator.sim.sglang_server", "--model-path", "m",
            "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        code = subprocess.run(
            argv, stdout=out, stderr=subprocess.STDOUT, timeout=20,
            env={**os.environ, "ORCH_SIM_CONFIG": str(config)}, check=False,
        ).returncode
    return code, log.read_text(encoding="utf-8", errors="replace")


async def test_ddtree_budget_defaults_to_block_minus_one_and_is_logged(tmp_path: Path) -> None:
    flags = [*DFLASH, "--speculative-algorithm", "DDTREE"]
    server = start_server(tmp_path, flags, {"ddtree": True})
    try:
        await server.wait_ready()
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{server.url}/sim/truth") as r:
                truth = await r.json()
            async with session.get(f"{server.url}/server_info") as r:
                info = await r.json()
        log = server.log().splitlines()
    finally:
        server.stop()
    assert info["speculative_ddtree_budget"] == 7
    assert truth["spec"]["verify_width"] == 8  # budget + 1 tree nodes
    (line,) = [ln for ln in log if "Initialized DDTree worker." in ln]
    assert line.endswith("Initialized DDTree worker. block_size=8, tree_budget=7, max_tree_nodes=8")
    event = parse_log_line(line)
    assert isinstance(event, DdtreeInitEvent)
    assert (event.block_size, event.tree_budget, event.max_tree_nodes) == (8, 7, 8)
    assert any(isinstance(parse_log_line(ln), DflashInitEvent) for ln in log)
