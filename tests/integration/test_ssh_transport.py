"""SSHTransport against a real OpenSSH sshd on loopback (started by ``sshd_fixture``)."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import structlog.testing

from orchestrator.host.ssh import JumpHost, SSHSettings, SSHTransport, parse_jump
from orchestrator.host.transport import (
    CommandTimeout,
    HostKeyMismatch,
    HostUnreachable,
    Transport,
)

if TYPE_CHECKING:
    from tests.integration.sshd_fixture import SSHDServer

pytest_plugins = ["tests.integration.sshd_fixture"]

T = 10.0  # per-command timeout for commands that should finish at once
GONE_WITHIN_S = 10.0
"""How long a stopped remote command may take to be gone: it goes at once, but on 2 cores
shared by six test workers the sshd and the kill can each wait seconds for a core."""


def settings_for(server: SSHDServer, **overrides: object) -> SSHSettings:
    base = SSHSettings(
        name="testhost",
        address=server.address,
        port=server.port,
        identity_file=str(server.client_key),
        known_hosts=str(server.known_hosts),
        connect_timeout=5.0,
        reconnect_attempts=6,
        reconnect_backoff_initial=0.1,
        reconnect_backoff_max=1.0,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


@pytest.fixture
async def ssh(sshd: SSHDServer) -> AsyncIterator[SSHTransport]:
    transport = SSHTransport(settings_for(sshd))
    yield transport
    await transport.close()


def process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def wait_gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        await asyncio.sleep(0.05)
    return not process_alive(pid)


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def names_in(directory: Path | str) -> list[str]:
    return sorted(os.listdir(directory))


async def wait_for_file_lines(path: Path, count: int, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if line_count(path) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never reached {count} lines")


# -- pure parts ---------------------------------------------------------------------------


def test_parse_jump_forms() -> None:
    assert parse_jump("bastion", "root") == JumpHost("root", "bastion", 22)
    assert parse_jump("bastion:2222", "root") == JumpHost("root", "bastion", 2222)
    assert parse_jump("ops@10.0.0.1:22", "root") == JumpHost("ops", "10.0.0.1", 22)
    assert parse_jump("[::1]:2200", "me") == JumpHost("me", "::1", 2200)
    for bad in ("", "host:abc", "host:70000", "[::1]x"):
        with pytest.raises(ValueError):
            parse_jump(bad, "root")


def test_settings_refuse_missing_known_hosts_without_insecure_flag() -> None:
    with pytest.raises(ValueError, match="known_hosts is required"):
        SSHSettings(name="h", address="127.0.0.1", identity_file="k", known_hosts=None)
    SSHSettings(
        name="h",
        address="127.0.0.1",
        identity_file="k",
        known_hosts=None,
        insecure_no_host_check=True,
    )


# -- commands -----------------------------------------------------------------------------


async def test_run_returns_exit_status_and_raw_bytes(ssh: SSHTransport) -> None:
    assert isinstance(ssh, Transport)
    result = await ssh.run(
        ["sh", "-c", r"printf 'caf\351 \377\376 ok\n'; printf 'warn\n' >&2; exit 3"], timeout=T
    )
    assert result.exit_status == 3
    assert result.stdout == b"caf\xe9 \xff\xfe ok\n"
    assert result.stderr == b"warn\n"
    assert not result.ok
    # The connection survived the non-UTF-8 bytes (FACTS: a text encoding would have killed it).
    again = await ssh.run(["true"], timeout=T)
    assert again.ok
    assert ssh.connection_generation == 1


async def test_argv_arrives_verbatim(ssh: SSHTransport) -> None:
    argv = [
        "two words",
        "it's",
        'say "hi"',
        "a; touch /tmp/orch-injected",
        "$(touch /tmp/orch-injected)",
        "`id`",
        "*",
        "$HOME",
        "back\\slash",
        "",
        "--flag=x y",
    ]
    result = await ssh.run(["printf", "%s\\n", *argv], timeout=T, check=True)
    assert result.stdout.decode().split("\n")[:-1] == argv
    assert "orch-injected" not in names_in("/tmp")


async def test_stdin_is_delivered(ssh: SSHTransport) -> None:
    data = bytes(range(256)) * 64
    result = await ssh.run(["cat"], stdin=data, timeout=T)
    assert result.stdout == data


async def test_many_concurrent_runs_fit_max_sessions(ssh: SSHTransport) -> None:
    """24 at once over one connection: OpenSSH's MaxSessions 10 would refuse 14 without the cap."""
    results = await asyncio.gather(
        *(ssh.run(["sh", "-c", f"sleep 0.2; echo {i}"], timeout=T) for i in range(24))
    )
    assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(24)]
    assert ssh.connection_generation == 1


async def test_timeout_stops_the_remote_command(ssh: SSHTransport, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(CommandTimeout, match="ran past"):
        await ssh.run(
            ["sh", "-c", 'echo $$ > "$1"; exec sleep 120', "sh", str(pid_file)], timeout=0.5
        )
    assert time.monotonic() - started < 60  # raised at the timeout, not at the sleep's end
    pid = int(pid_file.read_text())
    assert await wait_gone(pid, within=GONE_WITHIN_S), f"remote sleep {pid} survived the timeout"
    assert (await ssh.run(["echo", "still usable"], timeout=T)).stdout == b"still usable\n"


async def test_cancelled_call_stops_the_remote_command(ssh: SSHTransport, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    task = asyncio.create_task(
        ssh.run(["sh", "-c", 'echo $$ > "$1"; exec sleep 30', "sh", str(pid_file)], timeout=60)
    )
    await wait_for_file_lines(pid_file, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_gone(int(pid_file.read_text()), within=GONE_WITHIN_S)


async def test_stream_yields_lines_live_and_stops_the_command(
    ssh: SSHTransport, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    script = 'echo $$ > "$1"; i=0; while :; do echo "line $i"; i=$((i+1)); sleep 0.1; done'
    lines: list[bytes] = []
    async with ssh.stream(["sh", "-c", script, "sh", str(pid_file)]) as stream:
        async for line in stream:
            lines.append(line)
            if len(lines) == 3:
                break
    # The command never ends by itself, so these lines can only have arrived live.
    assert lines == [b"line 0", b"line 1", b"line 2"]
    assert await wait_gone(int(pid_file.read_text()), within=GONE_WITHIN_S)


async def test_stream_ends_when_the_command_exits(ssh: SSHTransport) -> None:
    async with ssh.stream(["printf", "a\\nb\\n\\377tail"]) as stream:
        lines = [line async for line in stream]
    assert lines == [b"a", b"b", b"\xfftail"]


# -- host keys ----------------------------------------------------------------------------


async def test_wrong_host_key_is_refused_and_nothing_runs(sshd: SSHDServer, tmp_path: Path) -> None:
    impostor = tmp_path / "impostor_key"
    sshd.new_key(impostor)
    keytype, key = impostor.with_suffix(".pub").read_text().split()[:2]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[{sshd.address}]:{sshd.port} {keytype} {key}\n")
    marker = tmp_path / "ran"
    transport = SSHTransport(settings_for(sshd, known_hosts=str(known_hosts)))
    with structlog.testing.capture_logs() as logs, pytest.raises(HostKeyMismatch) as caught:
        await transport.run(["touch", str(marker)], timeout=T)
    retries = [e for e in logs if e["event"] == "ssh.reconnect_wait"]
    assert retries == [], "a host-key refusal must not be retried"
    assert "testhost" in str(caught.value)
    assert str(known_hosts) in str(caught.value)
    assert not marker.exists()
    await transport.close()


async def test_missing_known_hosts_entry_is_refused(sshd: SSHDServer, tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    # The right key, but recorded for another address; and then no entries at all.
    other = sshd.known_hosts_line().replace(f"[{sshd.address}]:", "[127.0.0.2]:")
    for content in (other, ""):
        known_hosts.write_text(content)
        transport = SSHTransport(settings_for(sshd, known_hosts=str(known_hosts)))
        with pytest.raises(HostKeyMismatch, match=rf"\[{sshd.address}\]:{sshd.port}"):
            await transport.run(["true"], timeout=T)
        await transport.close()


async def test_insecure_mode_skips_the_host_key_check(sshd: SSHDServer) -> None:
    transport = SSHTransport(settings_for(sshd, known_hosts=None, insecure_no_host_check=True))
    assert (await transport.run(["echo", "ok"], timeout=T)).stdout == b"ok\n"
    await transport.close()


# -- dropped connections ------------------------------------------------------------------


async def _kill_sshd_mid_call(
    server: SSHDServer, transport: SSHTransport, counter: Path, *, idempotent: bool
) -> asyncio.Task[object]:
    await transport.run(["true"], timeout=T)  # connected before the call under test
    task: asyncio.Task[object] = asyncio.create_task(
        transport.run(
            ["sh", "-c", 'echo run >> "$1"; sleep 1; echo done', "sh", str(counter)],
            timeout=T,
            idempotent=idempotent,
        )
    )
    await wait_for_file_lines(counter, 1)
    server.stop()  # the listener and every per-connection sshd: the TCP connection drops
    await asyncio.sleep(0.3)
    server.start()
    return task


async def test_idempotent_call_reconnects_and_reruns(
    private_sshd: SSHDServer, tmp_path: Path
) -> None:
    counter = tmp_path / "counter"
    transport = SSHTransport(settings_for(private_sshd))
    task = await _kill_sshd_mid_call(private_sshd, transport, counter, idempotent=True)
    result = await task
    assert isinstance(result, object)
    assert getattr(result, "stdout", None) == b"done\n"
    assert counter.read_text().splitlines() == ["run", "run"]
    assert transport.connection_generation == 2
    await transport.close()


async def test_non_idempotent_call_is_never_rerun(private_sshd: SSHDServer, tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    transport = SSHTransport(settings_for(private_sshd))
    task = await _kill_sshd_mid_call(private_sshd, transport, counter, idempotent=False)
    with pytest.raises(HostUnreachable, match="outcome unknown"):
        await task
    await asyncio.sleep(1.2)  # long enough for a re-run to have written its line
    assert counter.read_text().splitlines() == ["run"]
    # The transport itself recovers for the next call.
    assert (await transport.run(["echo", "back"], timeout=T)).stdout == b"back\n"
    assert transport.connection_generation == 2
    await transport.close()


async def test_stream_ends_with_host_unreachable_when_the_connection_drops(
    private_sshd: SSHDServer,
) -> None:
    transport = SSHTransport(settings_for(private_sshd))
    script = "while :; do echo tick; sleep 0.05; done"
    with pytest.raises(HostUnreachable, match="streaming"):
        async with transport.stream(["sh", "-c", script]) as stream:
            async for _line in stream:
                private_sshd.stop()
    await transport.close()


async def test_frozen_peer_is_noticed_by_keepalive(private_sshd: SSHDServer) -> None:
    transport = SSHTransport(
        settings_for(private_sshd, keepalive_interval=0.2, keepalive_count_max=2)
    )
    await transport.run(["true"], timeout=T)
    # Freeze the per-connection sshd (not the listener): the TCP connection stays open but silent.
    for pid in private_sshd.forked_pids():
        os.kill(pid, signal.SIGSTOP)
    # Noticed by the keepalive: on the frozen connection the command's own timeout T would
    # have raised CommandTimeout instead of this answer on a new connection.
    result = await transport.run(["echo", "fresh"], timeout=T)
    assert result.stdout == b"fresh\n"
    assert transport.connection_generation == 2
    await transport.close()


async def test_unreachable_host_fails_after_bounded_retries(
    sshd: SSHDServer, tmp_path: Path
) -> None:
    key = tmp_path / "key"
    sshd.new_key(key)
    transport = SSHTransport(
        SSHSettings(
            name="nohost",
            address="127.0.0.1",
            port=1,  # nothing listens on port 1
            identity_file=str(key),
            known_hosts=str(tmp_path / "known_hosts"),
            reconnect_attempts=3,
            reconnect_backoff_initial=0.05,
        )
    )
    with pytest.raises(HostUnreachable, match="cannot connect"):
        await transport.run(["true"], timeout=T)
    await transport.close()


# -- files --------------------------------------------------------------------------------


async def test_file_round_trip(ssh: SSHTransport, tmp_path: Path) -> None:
    target = tmp_path / "unit.d" / "90-orchestrator.conf"
    target.parent.mkdir()
    data = b"[Service]\nExecStart=\n\xff\n"
    await ssh.write_file_atomic(str(target), data, mode=0o640, timeout=T)
    assert target.read_bytes() == data
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert await ssh.read_file(str(target), timeout=T) == data
    assert names_in(target.parent) == [target.name]  # no temp file left
    assert await ssh.remove_file(str(target), timeout=T) is True
    assert await ssh.remove_file(str(target), timeout=T) is False
    with pytest.raises(FileNotFoundError):
        await ssh.read_file(str(target), timeout=T)


async def test_write_is_never_seen_half_written(ssh: SSHTransport, tmp_path: Path) -> None:
    target = tmp_path / "big"
    versions = [bytes([65 + i]) * (512 * 1024) for i in range(2)]
    await ssh.write_file_atomic(str(target), versions[0], timeout=T)
    seen: list[bytes] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(target.read_bytes())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for i in range(6):
            await ssh.write_file_atomic(str(target), versions[i % 2], timeout=T)
    finally:
        stop.set()
        watcher.join()
    assert seen
    assert all(content in versions for content in seen)
    assert names_in(tmp_path) == ["big"]


async def test_write_into_missing_directory_raises(ssh: SSHTransport, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        await ssh.write_file_atomic(str(tmp_path / "nodir" / "f"), b"x", timeout=T)


# -- jump host ----------------------------------------------------------------------------


async def test_jump_host_carries_the_connection(
    sshd: SSHDServer, private_sshd: SSHDServer, tmp_path: Path
) -> None:
    jump = private_sshd
    # One client key and one known_hosts file for both hops, as a sweep file gives them.
    authorized = jump.root / "authorized_keys"
    authorized.write_text(sshd.client_key.with_suffix(".pub").read_text())
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(sshd.known_hosts_line() + jump.known_hosts_line())
    transport = SSHTransport(
        settings_for(
            sshd,
            known_hosts=str(known_hosts),
            jump=f"{jump.address}:{jump.port}",
            reconnect_attempts=1,
        )
    )
    assert (await transport.run(["echo", "via jump"], timeout=T)).stdout == b"via jump\n"
    assert "Accepted publickey for root" in jump.log_path.read_text()
    # The target is reached only through the jump: without it the connection is gone.
    jump.stop()
    with pytest.raises(HostUnreachable):
        await transport.run(["true"], timeout=T)
    await transport.close()


# -- sudo for a non-root login ------------------------------------------------------------


async def test_sudo_for_privileged_commands_and_files(sshd: SSHDServer, sudo_user: str) -> None:
    transport = SSHTransport(settings_for(sshd, user=sudo_user, sudo=True))
    as_user = await transport.run(["id", "-u"], timeout=T)
    as_root = await transport.run(["id", "-u"], timeout=T, privileged=True)
    assert as_user.stdout.strip() != b"0"
    assert as_root.stdout == b"0\n"
    with tempfile.TemporaryDirectory(prefix="orch-root-only-") as root_only:
        os.chmod(root_only, 0o700)  # only root may write (or even look) here
        target = Path(root_only) / "drop-in.conf"
        data = b'Environment="A=b c"\n\x00\xff'
        await transport.write_file_atomic(str(target), data, mode=0o600, timeout=T)
        assert target.read_bytes() == data
        assert stat.S_IMODE(target.stat().st_mode) == 0o600
        assert names_in(root_only) == [target.name]
        assert await transport.read_file(str(target), timeout=T) == data
        assert await transport.remove_file(str(target), timeout=T) is True
        assert await transport.remove_file(str(target), timeout=T) is False
        with pytest.raises(FileNotFoundError):
            await transport.read_file(str(target), timeout=T)
        # A privileged command that times out is stopped too (sudo relays the signal).
        pid_file = Path(root_only) / "pid"
        with pytest.raises(CommandTimeout):
            await transport.run(
                ["sh", "-c", 'echo $$ > "$1"; exec sleep 30', "sh", str(pid_file)],
                timeout=0.5,
                privileged=True,
            )
        assert await wait_gone(int(pid_file.read_text()), within=4.0)
        pid_file.unlink()
        # Without sudo the same login cannot write there.
        plain = SSHTransport(settings_for(sshd, user=sudo_user, sudo=False))
        with pytest.raises(PermissionError):
            await plain.write_file_atomic(str(target), data, timeout=T)
        await plain.close()
    await transport.close()
