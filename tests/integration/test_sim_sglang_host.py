"""A simulated host running the simulated SGLang server as its unit: readiness over HTTP, the
unit's program answering ``--help`` for real, GPU memory from the server's registrations, and
server faults passed through the host's settings."""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from orchestrator.sim.faults import HostSettings
from tests.integration.test_sim_support import Client, eventually, start_host

UNIT = "sglang.service"
GPU_QUERY = "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits"
FAST = {"load_s": 0.5, "warmup_s": 0.1, "stop_delay_s": 0.1}


@pytest.fixture
async def sglang_host(tmp_path: Path) -> AsyncIterator[Client]:
    settings = HostSettings(gpu_count=8, memory_release_lag_s=0.3, server=dict(FAST))
    client = await start_host(tmp_path, settings=settings)
    try:
        yield client
    finally:
        await client.host.stop()


async def _healthy(url: str) -> bool:
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{url}/health") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def test_unit_runs_the_simulated_server(sglang_host: Client) -> None:
    client = sglang_host
    url = client.host.base_url
    await eventually(lambda: _healthy(url), timeout=30, interval=0.2)
    async with aiohttp.ClientSession() as http, http.get(f"{url}/server_info") as response:
        info = await response.json()
    assert info["tp_size"] == 8 and info["port"] == 30000

    used = await client.text(GPU_QUERY)
    assert all(int(line.split(", ")[1]) > 1000 for line in used.splitlines())
    journal = await client.text(f"journalctl -u {UNIT} -o cat")
    assert "The server is fired up and ready to roll!" in journal

    # the unit's own program, run over SSH, is the real thing (a preflight reads its flags)
    exec_start = (await client.show("ExecStart"))["ExecStart"]
    argv = exec_start.split("argv[]=", 1)[1].split(" ; ", 1)[0].split()
    helped = await client.run(shlex.join([*argv[:3], "--help"]))
    assert helped.exit_status == 0
    assert b"--speculative-algorithm" in helped.stdout

    pid = (await client.show("MainPID"))["MainPID"]
    environ = (await client.run(f"cat /proc/{pid}/environ")).stdout.split(b"\0")
    config_path = next(e for e in environ if e.startswith(b"ORCH_SIM_CONFIG=")).split(b"=", 1)[1]
    config = json.loads(await asyncio.to_thread(Path(config_path.decode()).read_text))
    assert config["gpu_state_dir"] and config["load_s"] == 0.5

    assert (await client.run(f"systemctl stop {UNIT}")).exit_status == 0

    async def released() -> bool:
        lines = (await client.text(GPU_QUERY)).splitlines()
        return all(line.endswith(", 3") for line in lines)

    await eventually(released, timeout=10)


async def test_server_fault_passes_through_host_settings(tmp_path: Path) -> None:
    settings = HostSettings(server={**FAST, "faults": {"crash_at_start": "oom"}})
    client = await start_host(tmp_path, settings=settings)
    try:

        async def failed() -> bool:
            return (await client.show("ActiveState"))["ActiveState"] == "failed"

        await eventually(failed, timeout=30, interval=0.2)
        journal = (await client.text(f"journalctl -u {UNIT} -o cat")).lower()
        assert "out of memory" in journal
        assert (await client.show("Result"))["Result"] == "exit-code"
    finally:
        await client.host.stop()
