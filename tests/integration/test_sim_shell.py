"""The simulated host's POSIX shell subset, as the SSH transport uses it on every host:
``sh -c`` reports its process group, ``kill -- -PGID`` stops that command."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.host.ssh import SSHSettings, SSHTransport
from orchestrator.sim.cli import SimCluster, simulated_hosts

ADDRESS = "127.0.0.91"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[SimCluster]:
    async with simulated_hosts(
        tmp_path, [("shell-01", ADDRESS, 2291)], defaults={"time_scale": 0.05}
    ) as running:
        yield running


def _transport(cluster: SimCluster) -> SSHTransport:
    return SSHTransport(
        SSHSettings(
            name="shell-01",
            address=ADDRESS,
            port=2291,
            identity_file=str(cluster.key_path),
            known_hosts=str(cluster.known_hosts),
        )
    )


async def test_parameters_are_substituted(cluster: SimCluster) -> None:
    transport = _transport(cluster)
    try:
        result = await transport.run(
            ["sh", "-c", 'printf "%s\\n" "$0" "$1" && exec "$@"', "name", "echo", "a b", "c"],
            timeout=10,
        )
        assert result.stdout == b"name\necho\na b c\n"
    finally:
        await transport.close()


async def test_leaving_a_stream_stops_the_remote_command(cluster: SimCluster) -> None:
    transport = _transport(cluster)
    try:
        async with transport.stream(["journalctl", "-f", "-u", "sglang.service", "-o", "json"]):
            await asyncio.sleep(0.2)
        # The stream's shell was killed by its process group: nothing of it is left.
        host = cluster.hosts[0]
        for _ in range(50):
            if not host.shell_groups():
                break
            await asyncio.sleep(0.1)
        assert host.shell_groups() == {}
        unknown = await transport.run(["kill", "-TERM", "--", "-999999"], timeout=10)
        assert unknown.exit_status == 1 and b"No such process" in unknown.stderr
    finally:
        await transport.close()
