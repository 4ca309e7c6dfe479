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
        for _ in range(300):  # 30 s: a deadline for a group that never goes, not a speed check
            if not host.shell_groups():
                break
            await asyncio.sleep(0.1)
        assert host.shell_groups() == {}
        unknown = await transport.run(["kill", "-TERM", "--", "-999999"], timeout=10)
        assert unknown.exit_status == 1 and b"No such process" in unknown.stderr
    finally:
        await transport.close()


async def test_file_tools_answer_like_coreutils(cluster: SimCluster) -> None:
    transport = _transport(cluster)
    try:
        directory = "/etc/systemd/system/probe.d"
        assert (await transport.run(["mkdir", "-p", "--", directory], timeout=10)).ok
        await transport.write_file_atomic(f"{directory}/a.conf", b"x", timeout=10)
        listing = await transport.run(["ls", "-1A", "--", directory], timeout=10)
        assert listing.stdout == b"a.conf\n"

        busy = await transport.run(["rmdir", "--", directory], timeout=10)
        assert busy.exit_status == 1 and b"Directory not empty" in busy.stderr
        lenient = ["rmdir", "--ignore-fail-on-non-empty", "--", directory]
        assert (await transport.run(lenient, timeout=10)).ok
        assert await transport.remove_file(f"{directory}/a.conf", timeout=10)
        assert (await transport.run(lenient, timeout=10)).ok
        gone = await transport.run(["test", "-d", directory], timeout=10)
        assert gone.exit_status == 1
    finally:
        await transport.close()
