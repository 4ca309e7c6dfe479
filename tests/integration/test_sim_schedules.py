"""The simulated engines run a speculative schedule as real processes over HTTP: vLLM drafts by
its running batch, SGLang falls back to static params where it does not take adaptive steps,
and reads its adaptive file from the host's root."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from orchestrator.sim import vllm_schedule
from orchestrator.sim.server_args import build_parser
from orchestrator.sim.server_args import resolve as resolve_sglang
from tests.integration.sim_server_proc import FAST, SimServer, free_port, start_server
from tests.integration.test_sglang_adaptive_source import sglang_module as sglang_module
from tests.integration.test_sglang_adaptive_source import sglang_reader
from tests.integration.test_vllm_real_parser import vllm_source as vllm_source

SCHEDULE = [[1, 1, 7], [2, 64, 1]]
"""Seven draft tokens for a request alone, one for any batch of two or more."""


def start_vllm(tmp: Path, flags: list[str], env: dict[str, str] | None = None) -> SimServer:
    """``python -m orchestrator.sim.vllm_server serve m FLAGS`` on a free port."""
    port = free_port()
    config_path = tmp / "vllm.json"
    config_path.write_text(json.dumps({**FAST, "restart_jitter": 0.0}), encoding="utf-8")
    log_path = tmp / "vllm.log"
    argv = [sys.executable, "-m", "orchestrator.sim.vllm_server", "serve", "m", *flags,
            "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    full_env = {**os.environ, "ORCH_SIM_CONFIG": str(config_path),
                "VLLM_LOG_STATS_INTERVAL": "1000", **(env or {})}  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    return SimServer(proc, port, log_path, config_path)


async def _metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(f"{url}/metrics") as resp:
        text = await resp.text()
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"(vllm:spec_decode_num_(?:drafts|draft_tokens|accepted_tokens)_total)"
                         r"\{[^}]*\} (\S+)$", line)  # fmt: skip
        if match:
            found[match[1]] = float(match[2])
    return found


async def _drafted_per_draft(session: aiohttp.ClientSession, url: str, concurrency: int
                             ) -> tuple[float, float]:  # fmt: skip
    """Draft tokens per draft and accepted tokens per draft over ``concurrency`` requests
    started together."""
    before = await _metrics(session, url)
    body = {"model": "m", "messages": [{"role": "user", "content": "Say something."}],
            "max_tokens": 160, "ignore_eos": True, "temperature": 0}

    async def one(index: int) -> None:
        payload = {**body, "messages": [{"role": "user", "content": f"Say something {index}."}]}
        async with session.post(f"{url}/v1/chat/completions", json=payload) as resp:
            assert resp.status == 200, await resp.text()
            await resp.json()

    await asyncio.gather(*(one(i) for i in range(concurrency)))
    after = await _metrics(session, url)
    drafts, tokens, accepted = (
        after[f"vllm:spec_decode_num_{name}_total"] - before[f"vllm:spec_decode_num_{name}_total"]
        for name in ("drafts", "draft_tokens", "accepted_tokens")
    )
    return tokens / drafts, accepted / drafts


async def _serve_vllm(
    tmp: Path, spec: dict[str, Any], concurrencies: list[int]
) -> tuple[list[tuple[float, float]], str]:
    """Per load in turn, :func:`_drafted_per_draft` of a server with ``spec``; and its log."""
    server = start_vllm(tmp, ["--speculative-config", json.dumps(spec)])
    try:
        await server.wait_ready()
        async with aiohttp.ClientSession() as session:
            found = [await _drafted_per_draft(session, server.url, c) for c in concurrencies]
    finally:
        server.stop()
    return found, server.log()


async def test_vllm_drafts_by_its_running_batch(tmp_path: Path) -> None:
    spec = {"method": "dflash", "model": "d", "num_speculative_tokens": 7,
            "num_speculative_tokens_per_batch_size": SCHEDULE}
    found, log = await _serve_vllm(tmp_path, spec, [1, 16])
    (alone, alone_accepted), (crowded, crowded_accepted) = found
    assert alone == 7.0  # every step of a request alone drafted 7
    # Sixteen together draft 1 a step, but for the last request of the batch, which is alone
    # for a few steps once the others are done.
    assert 1.0 <= crowded < 2.0, crowded
    # Seven drafts accept more a step than one does (prose: about 2.1 against 0.7).
    assert alone_accepted > 1.3 > 1.1 > crowded_accepted, (alone_accepted, crowded_accepted)
    assert "Dynamic speculative decoding is not supported" not in log


async def test_vllm_refuses_a_schedule_not_starting_at_1_as_the_engine_core(
    tmp_path: Path,
) -> None:
    spec = {"method": "eagle3", "model": "d", "num_speculative_tokens": 4,
            "num_speculative_tokens_per_batch_size": [[2, 16, 4]]}
    server = start_vllm(tmp_path, ["--speculative-config", json.dumps(spec)])
    try:
        assert server.wait_exit(20) == 1
    finally:
        server.stop()
    log = server.log()
    assert re.search(
        r"\(EngineCore pid=\d+\) ERROR .* ValueError: The first batch-size range must start at "
        r"1 so every runtime batch size has a defined schedule\.", log
    ), log
    assert "RuntimeError: Engine core initialization failed." in log


async def test_vllm_logs_its_fallback_and_runs_static_for_a_method_v1_drops(
    tmp_path: Path,
) -> None:
    spec = {"method": "suffix", "num_speculative_tokens": 5,
            "num_speculative_tokens_per_batch_size": SCHEDULE}
    [(crowded, _)], log = await _serve_vllm(tmp_path, spec, [8])
    assert crowded == 5.0  # static: five a step whatever the batch
    assert re.search(
        r"\(APIServer pid=\d+\) WARNING \d\d-\d\d \d\d:\d\d:\d\d \[vllm\.py:1100\] Dynamic "
        r"speculative decoding is not supported with the 'suffix' speculative method on Model "
        r"Runner V1\. Disabling num_speculative_tokens_per_batch_size and falling back to "
        r"static num_speculative_tokens=5\.$", log, re.MULTILINE
    ), log


DDTREE = ["--model-path", "m", "--speculative-algorithm", "DDTREE",
          "--speculative-draft-model-path", "d", "--decode-log-interval", "4"]  # fmt: skip


async def _generate(url: str, concurrency: int) -> list[dict[str, Any]]:
    body = {"sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}
    async with aiohttp.ClientSession() as session:

        async def one(index: int) -> dict[str, Any]:
            async with session.post(f"{url}/generate", json={**body, "text": f"x {index}"}) as r:
                assert r.status == 200, await r.text()
                data: dict[str, Any] = await r.json()
                return data

        return list(await asyncio.gather(*(one(i) for i in range(concurrency))))


async def test_sglang_ddtree_with_adaptive_logs_the_fallback_and_runs_static(
    tmp_path: Path,
) -> None:
    flags = [*DDTREE, "--speculative-adaptive", "--speculative-adaptive-config", "/nowhere.json"]
    server = start_server(tmp_path, flags)
    try:
        await server.wait_ready()
        answers = await _generate(server.url, 4)
        async with aiohttp.ClientSession() as session, \
                session.get(f"{server.url}/server_info") as resp:  # fmt: skip
            info = await resp.json()
    finally:
        server.stop()
    log = server.log()
    assert re.search(
        r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] speculative_adaptive disabled: "
        r"speculative_algorithm=DDTREE \(only EAGLE/EAGLE3 are supported\)\. Falling back to "
        r"static speculative params\.$", log, re.MULTILINE
    ), log
    assert info["speculative_adaptive"] is False
    assert info["speculative_adaptive_config"] == "/nowhere.json"  # never opened
    assert "AdaptiveSpeculativeParams initialized" not in log
    # Static DDTree: the same budget at every step, so accept lengths well above one draft.
    assert all(a["meta_info"]["spec_accept_length"] > 2.0 for a in answers)


async def test_sglang_reads_its_adaptive_file_below_the_hosts_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    slots = {"1": {"candidate_steps": [5]}, "2": {"candidate_steps": [0]}}
    (root / "etc" / "adaptive.json").write_text(json.dumps(slots), encoding="utf-8")
    flags = ["--model-path", "m", "--speculative-algorithm", "EAGLE3",
             "--speculative-draft-model-path", "d", "--speculative-adaptive",
             "--speculative-adaptive-config", "/etc/adaptive.json"]  # fmt: skip
    server = start_server(tmp_path, flags, env={"ORCH_SIM_ROOT": str(root)})
    try:
        await server.wait_ready()
        alone = (await _generate(server.url, 1))[0]["meta_info"]
        together = await _generate(server.url, 8)
    finally:
        server.stop()
    log = server.log()
    assert "AdaptiveSpeculativeParams initialized: steps=5, candidate_steps=[5]" in log, log
    assert alone["spec_accept_length"] > 2.0  # five steps drafted for a request alone
    # A batch of two or more drafts nothing: one token a step, but while one is alone.
    assert min(a["meta_info"]["spec_accept_length"] for a in together) < 1.5


def test_sglang_refuses_an_adaptive_file_without_a_batch_size_key(tmp_path: Path) -> None:
    config = tmp_path / "adaptive.json"
    config.write_text('{"ema_alpha": 0.5}', encoding="utf-8")
    flags = ["--model-path", "m", "--speculative-algorithm", "EAGLE", "--speculative-adaptive",
             "--speculative-adaptive-config", str(config)]  # fmt: skip
    server = start_server(tmp_path, flags)
    try:
        assert server.wait_exit(20) == 1
    finally:
        server.stop()
    assert "ValueError: speculative_adaptive_config must contain at least one integer-string " \
        "BS key" in server.log()  # fmt: skip


def test_the_simulated_adaptive_steps_move_as_sglang_0_5_23s_own(
    sglang_module: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same verify results fed to SGLang 0.5.23's ``AdaptiveSpeculativeParams`` and to
    the simulator's policy: the same steps for every batch after every step."""
    slots = {"1": {"candidate_steps": [1, 3, 5, 7], "down_hysteresis": -0.25},
             "8": {"candidate_steps": [0, 1, 3], "down_hysteresis": 0.0, "ceiling_coeff": 2},
             "32": {"candidate_steps": [0, 1], "warmup_batches": 3, "update_interval": 2}}
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({**slots, "ema_alpha": 0.3}), encoding="utf-8")
    code = sglang_reader(sglang_module, monkeypatch)
    real = code["AdaptiveSpeculativeParams"](initial_steps=3, cfg_path=str(path))
    ns, argv = _parsed(["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                        "--speculative-adaptive", "--speculative-adaptive-config", str(path)])
    args = resolve_sglang(ns, argv, version="0.5.23", ddtree=True, environ={})
    ours = args.drafting.policy()
    rng = random.Random(7)
    for index in range(900):
        batch = rng.choice([1, 2, 5, 8, 12, 31, 32, 40])
        steps = real.get_steps_for_batch(batch)
        assert ours.shape(batch).max_depth == steps
        mean = (4.0, 0.1, 1.5)[index // 300]  # acceptance high, then low, then middling
        drafts = [min(steps, int(rng.expovariate(1 / mean))) for _ in range(batch)]
        changed = real.on_verify_complete(drafts, batch)
        said = ours.observe(batch, drafts)
        assert (said is None) == (changed is None), (said, changed)
    moved = {key for key, _, _ in ours.changes}
    assert moved == {1, 8, 32}, ours.changes  # every slot moved at least once


def _parsed(flags: list[str]) -> tuple[Any, list[str]]:
    argv = ["--model-path", "m", *flags]
    return build_parser("0.5.23", True).parse_args(argv), argv


def test_the_simulated_lookup_is_vllm_0_33s_own(vllm_source: Path) -> None:
    """Random schedules, well formed or not, through vLLM's own
    ``build_dynamic_sd_schedule_lookup`` and the simulator's port: the same table or the same
    error."""
    utils = vllm_source / "vllm" / "v1" / "spec_decode" / "dynamic" / "utils.py"
    real = runpy.run_path(str(utils))["build_dynamic_sd_schedule_lookup"]
    rng = random.Random(3)
    agreed = failed = 0
    for _ in range(400):
        ranges = [[rng.randint(-1, 40), rng.randint(0, 70), rng.randint(-1, 9)]
                  for _ in range(rng.randint(1, 4))]  # fmt: skip
        if rng.random() < 0.6:  # mostly well formed: sorted, adjacent or with gaps, from 1
            start, ranges = 1, []
            for _ in range(rng.randint(1, 4)):
                end = start + rng.randint(0, 20)
                ranges.append([start, end, rng.randint(0, 9)])
                start = end + 1 + rng.choice([0, 0, 3])
        size, tokens = rng.randint(1, 64), rng.randint(1, 8)
        outcomes = []
        for build in (real, vllm_schedule.dense_lookup):
            try:
                outcomes.append(build(ranges, size, tokens))
            except ValueError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1], (ranges, size, tokens)
        failed += isinstance(outcomes[0], str)
        agreed += 1
    assert agreed == 400 and 40 < failed < 360
