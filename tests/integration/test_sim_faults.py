"""Host-side faults of the simulated host, each observed over SSH as an orchestrator would."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncssh
import pytest

from orchestrator.sim.faults import FrozenFault, HostSettings, SshDropFault
from tests.integration.test_sim_support import (
    CHILD_PROGRAM,
    Client,
    child_unit,
    eventually,
    start_host,
)

UNIT = "sglang.service"
GPU_QUERY = "nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits"
APPS_QUERY = "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits"


async def _host(
    tmp_path: Path, settings: HostSettings, env: dict[str, str] | None = None, stop_s: int = 5
) -> Client:
    program = tmp_path / "child.py"
    program.write_text(CHILD_PROGRAM)
    return await start_host(
        tmp_path, settings=settings, unit_text=child_unit(program, timeout_stop_s=stop_s, env=env)
    )


async def _registered(client: Client) -> None:
    async def held() -> bool:
        return "0, 50003" in await client.text(GPU_QUERY)

    await eventually(held)


async def test_memory_never_released(tmp_path: Path) -> None:
    settings = HostSettings(gpu_count=1, memory_never_released=True, memory_release_lag_s=0.1)
    client = await _host(tmp_path, settings, env={"REGISTER_MIB": "50000"})
    try:
        await _registered(client)
        await client.run(f"systemctl stop {UNIT}")
        await asyncio.sleep(0.5)
        assert await client.text(GPU_QUERY) == "0, 50003\n"
        assert await client.text(APPS_QUERY) == ""  # no process, yet the memory stays used
    finally:
        await client.host.stop()


async def test_process_stuck_after_sigkill(tmp_path: Path) -> None:
    # It outlives the final SIGKILL by 3 s, 2 s beyond the unit's give-up: time for the
    # queries below to see it on a loaded machine.
    settings = HostSettings(gpu_count=1, survives_sigkill_s=3.0, memory_release_lag_s=0.2)
    client = await _host(tmp_path, settings, env={"REGISTER_MIB": "50000"}, stop_s=1)
    try:
        await _registered(client)
        pid = (await client.show("MainPID"))["MainPID"]
        started = time.monotonic()
        assert (await client.run(f"systemctl stop {UNIT}")).exit_status == 0
        assert time.monotonic() - started >= 2.0  # TimeoutStopSec twice: SIGTERM, final SIGKILL
        journal = await client.text(f"journalctl -u {UNIT} -o cat")
        assert f"{UNIT}: State 'stop-sigterm' timed out. Killing." in journal
        stuck = "Processes still around after final SIGKILL. Entering failed mode."
        assert f"{UNIT}: {stuck}" in journal
        assert (await client.show("ActiveState", "Result")) == {
            "ActiveState": "failed",
            "Result": "timeout",
        }
        assert await client.text(GPU_QUERY) == "0, 50003\n"  # VRAM still held ...
        assert (await client.text(APPS_QUERY)).startswith(f"{pid}, 50000")
        # ... and the next start goes ahead anyway, as on a real host
        assert (await client.run(f"systemctl start {UNIT}")).exit_status == 0
        assert (await client.show("ActiveState"))["ActiveState"] == "active"

        async def released_old() -> bool:
            return pid not in await client.text(APPS_QUERY)

        await eventually(released_old, timeout=5)
    finally:
        await client.host.stop()


async def test_journal_lines_lost(tmp_path: Path) -> None:
    client = await _host(tmp_path, HostSettings(journal_drop_rate=1.0))
    try:
        await asyncio.sleep(0.5)
        await client.run(f"systemctl restart {UNIT}")
        lines = (await client.text(f"journalctl -u {UNIT} -o cat")).splitlines()
        assert "Started Test child." in lines and "Stopping Test child..." in lines
        assert not [line for line in lines if line.startswith("child ")]  # the service's own
    finally:
        await client.host.stop()


async def test_ssh_drop_on_a_command_leaves_the_job_running(tmp_path: Path) -> None:
    drop = SshDropFault(command=r"^systemctl restart", delay_s=0.05)
    client = await _host(tmp_path, HostSettings(ssh_drop=drop), env={"STOP_DELAY_S": "0.5"})
    try:
        before = await client.show("InvocationID")
        conn = await client.connect()
        try:
            cut = await asyncio.wait_for(conn.run(f"systemctl restart {UNIT}"), 5)
            assert cut.exit_status is None  # the channel died without an exit status
        except (asyncssh.ConnectionLost, asyncssh.DisconnectError, ConnectionError):
            pass
        with pytest.raises((asyncssh.ChannelOpenError, asyncssh.Error, ConnectionError)):
            await conn.run("true")  # the connection is gone
        conn.close()

        async def restarted() -> bool:
            values = await client.show("InvocationID", "ActiveState")
            new_run = values["InvocationID"] != before["InvocationID"]
            return values["ActiveState"] == "active" and new_run

        await eventually(restarted)  # the job finished on the host despite the drop
        second = await client.run(f"systemctl restart {UNIT}")  # times: 1 -> no second drop
        assert second.exit_status == 0
    finally:
        await client.host.stop()


async def test_frozen_host_stops_answering_then_recovers(tmp_path: Path) -> None:
    frozen = FrozenFault(command=r"^hostname$", duration_s=1.5)
    client = await _host(tmp_path, HostSettings(frozen=frozen))
    try:
        async with await client.connect() as conn:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(conn.run("hostname"), 0.5)
        with pytest.raises((asyncio.TimeoutError, asyncssh.Error, OSError)):
            await asyncio.wait_for(client.run("true"), 0.5)  # TCP accepted, never greeted
        await asyncio.sleep(1.2)
        result = await client.run("id -u")
        assert result.exit_status == 0 and result.stdout == b"0\n"
    finally:
        await client.host.stop()
