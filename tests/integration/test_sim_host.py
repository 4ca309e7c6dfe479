"""The simulated host over the wire: systemctl, drop-ins, restart timing, journal, nvidia-smi,
MaxSessions. Every check goes through SSH (asyncssh, and the system OpenSSH client where noted),
and the unit runs a real child process."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncssh
import pytest

from orchestrator.sim.faults import HostSettings
from tests.integration.test_sim_support import (
    CHILD_PROGRAM,
    Client,
    child_unit,
    ensure_openssh_client,
    eventually,
    pid_alive,
    start_host,
)

UNIT = "sglang.service"
DROPIN_DIR = "/etc/systemd/system/sglang.service.d"


@pytest.fixture(scope="session", autouse=True)
def _openssh() -> None:
    ensure_openssh_client()


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "child.py"
    path.write_text(CHILD_PROGRAM)
    return path


async def _host(tmp_path: Path, program: Path, **kwargs: object) -> Client:
    env = kwargs.pop("env", None)
    timeout = kwargs.pop("timeout_stop_s", 5)
    settings = kwargs.pop("settings", None)
    return await start_host(
        tmp_path,
        settings=settings,  # type: ignore[arg-type]
        unit_text=child_unit(program, timeout_stop_s=timeout, env=env),  # type: ignore[arg-type]
    )


@pytest.fixture
async def client(tmp_path: Path, program: Path) -> AsyncIterator[Client]:
    host = await _host(tmp_path, program, env={"ROLE": "test"})
    try:
        yield host
    finally:
        await host.host.stop()


async def write_dropin(client: Client, name: str, text: str) -> None:
    """Write atomically over SFTP (tmp + posix_rename), as the orchestrator does."""
    async with await client.connect() as conn, conn.start_sftp_client() as sftp:
        if not await sftp.exists(DROPIN_DIR):
            await sftp.makedirs(DROPIN_DIR)
        async with sftp.open(f"{DROPIN_DIR}/.{name}.tmp", "wb") as handle:
            await handle.write(text.encode())
        await sftp.posix_rename(f"{DROPIN_DIR}/.{name}.tmp", f"{DROPIN_DIR}/{name}")


async def journal_shows(client: Client, *texts: str) -> None:
    """Wait until the unit's journal holds ``texts`` in that order: the child's own word
    that it got that far, where a fixed sleep would race a loaded machine."""
    deadline = time.monotonic() + 30
    while True:
        journal = await client.text(f"journalctl -u {UNIT} -o cat")
        at = 0
        for text in texts:
            at = journal.find(text, at)
            if at < 0:
                break
        else:
            return
        assert time.monotonic() < deadline, journal
        await asyncio.sleep(0.05)


async def test_show_prints_requested_properties_in_systemds_order(client: Client) -> None:
    asked = "Job,NRestarts,ExecMainStatus,ExecMainCode,ExecMainStartTimestampMonotonic,Result,"
    asked += "SubState,ActiveState,InvocationID,MainPID"
    result = await client.run(f"systemctl show -p {asked} {UNIT}")
    assert result.exit_status == 0
    lines = result.stdout.decode().splitlines()
    assert [line.split("=", 1)[0] for line in lines] == [
        "MainPID",
        "Result",
        "NRestarts",
        "ExecMainStartTimestampMonotonic",
        "ExecMainCode",
        "ExecMainStatus",
        "ActiveState",
        "SubState",
        "Job",
        "InvocationID",
    ]
    values = dict(line.split("=", 1) for line in lines)
    assert int(values["MainPID"]) > 0 and pid_alive(int(values["MainPID"]))
    assert re.fullmatch(r"[0-9a-f]{32}", values["InvocationID"])
    assert values["ActiveState"] == "active" and values["SubState"] == "running"
    assert values["Job"] == "" and values["Result"] == "success" and values["NRestarts"] == "0"

    # the same answer through OpenSSH, with repeated -p and an unset value printed as `Key=`
    await client.run(f"systemctl stop {UNIT}")
    done = await client.openssh(
        f"systemctl show -p InvocationID -p MainPID -p TimeoutStopUSec {UNIT}"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "TimeoutStopUSec=5s\nMainPID=0\nInvocationID=\n"

    missing = await client.openssh("systemctl show -p LoadState,ActiveState nope.service")
    assert missing.returncode == 0
    assert missing.stdout.decode() == "LoadState=not-found\nActiveState=inactive\n"


async def test_show_formats_exec_start_environment_and_timeouts(client: Client) -> None:
    await write_dropin(
        client,
        "50-env.conf",
        '[Service]\nEnvironment="A=1" "B=two words" C=$$x\nTimeoutStopSec=1min 30s\n',
    )
    await client.run("systemctl daemon-reload")
    values = await client.show("Environment", "TimeoutStopUSec", "ExecStart", "DropInPaths")
    assert values["Environment"] == 'ROLE=test A=1 "B=two words" "C=\\$\\$x"'
    assert values["TimeoutStopUSec"] == "1min 30s"
    assert values["DropInPaths"] == f"{DROPIN_DIR}/50-env.conf"
    assert re.fullmatch(
        r"\{ path=\S+ ; argv\[\]=\S+ \S+child\.py ; ignore_errors=no ; start_time=\[\w{3} "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \w+\] ; stop_time=\[n/a\] ; pid=\d+ ; code=\(null\) ; "
        r"status=0/0 \}",
        values["ExecStart"],
    )


async def test_cat_and_dropin_reset_rule(client: Client, program: Path) -> None:
    old_pid = (await client.show("MainPID"))["MainPID"]
    # a drop-in WITHOUT the empty ExecStart= reset: bad-setting, restart fails, old process lives
    bad = f'[Service]\nExecStart="{sys.executable}" "{program}" --other\n'
    await write_dropin(client, "90-orchestrator.conf", bad)
    await client.run("systemctl daemon-reload")
    values = await client.show("LoadState", "ActiveState", "MainPID")
    assert values == {"LoadState": "bad-setting", "ActiveState": "active", "MainPID": old_pid}
    failed = await client.run(f"systemctl restart {UNIT}")
    assert failed.exit_status == 1
    assert failed.stderr.decode() == (
        f"Failed to restart {UNIT}: Unit {UNIT} has a bad unit file setting.\n"
        f"See system logs and 'systemctl status {UNIT}' for details.\n"
    )
    assert (await client.show("MainPID"))["MainPID"] == old_pid and pid_alive(int(old_pid))

    # with the reset: loads, cat shows each file under its own header
    good = f'[Service]\nExecStart=\nExecStart="{sys.executable}" "{program}" --other\n'
    await write_dropin(client, "90-orchestrator.conf", good)
    await client.run("systemctl daemon-reload")
    cat = await client.openssh(f"systemctl cat {UNIT}")
    unit_text = (client.host.root / "etc/systemd/system/sglang.service").read_text()
    assert cat.stdout.decode() == (
        f"# /etc/systemd/system/{UNIT}\n{unit_text}\n# {DROPIN_DIR}/90-orchestrator.conf\n{good}"
    )
    restarted = await client.run(f"systemctl restart {UNIT}")
    assert restarted.exit_status == 0
    values = await client.show("LoadState", "MainPID", "ExecStart")
    assert values["LoadState"] == "loaded" and values["MainPID"] != old_pid
    assert f"argv[]={sys.executable} {program} --other ;" in values["ExecStart"]
    cmdline = await client.run(f"cat /proc/{values['MainPID']}/cmdline")
    assert cmdline.stdout.split(b"\0")[1:3] == [str(program).encode(), b"--other"]

    # a later drop-in in /run overrides ours (lexical order across directories)
    run_dir = client.host.root / "run/systemd/system/sglang.service.d"
    run_dir.mkdir(parents=True)
    admin = f'[Service]\nExecStart=\nExecStart="{sys.executable}" "{program}" --admin\n'
    (run_dir / "99-admin.conf").write_text(admin)
    await client.run("systemctl daemon-reload")
    values = await client.show("DropInPaths", "ExecStart")
    assert values["DropInPaths"].split() == [
        f"{DROPIN_DIR}/90-orchestrator.conf",
        "/run/systemd/system/sglang.service.d/99-admin.conf",
    ]
    assert "--admin ;" in values["ExecStart"]


async def test_daemon_reload_is_needed_to_see_changes(client: Client) -> None:
    # first drop-in into a NEW .d directory: NeedDaemonReload stays "no" (systemd 252 quirk)
    await write_dropin(client, "50-a.conf", '[Service]\nEnvironment="MARK=one"\n')
    assert (await client.show("NeedDaemonReload"))["NeedDaemonReload"] == "no"
    restart = await client.run(f"systemctl restart {UNIT}")
    assert restart.exit_status == 0
    pid = (await client.show("MainPID"))["MainPID"]
    environ = (await client.run(f"cat /proc/{pid}/environ")).stdout.split(b"\0")
    assert b"MARK=one" not in environ  # restart without reload ran the old command
    assert any(item.startswith(b"ORCH_SIM_CONFIG=") for item in environ)

    await client.run("systemctl daemon-reload")
    await write_dropin(client, "60-b.conf", '[Service]\nEnvironment="MARK=two"\n')
    assert (await client.show("NeedDaemonReload"))["NeedDaemonReload"] == "yes"
    warned = await client.run(f"systemctl restart {UNIT}")
    assert b"changed on disk. Run 'systemctl daemon-reload'" in warned.stderr
    await client.run("systemctl daemon-reload")
    assert (await client.show("NeedDaemonReload"))["NeedDaemonReload"] == "no"
    await client.run(f"systemctl restart {UNIT}")
    pid = (await client.show("MainPID"))["MainPID"]
    environ = (await client.run(f"sudo -n cat /proc/{pid}/environ")).stdout.split(b"\0")
    assert b"MARK=two" in environ


async def test_restart_returns_after_the_old_process_is_gone(tmp_path: Path, program: Path) -> None:
    client = await _host(
        tmp_path,
        program,
        env={"STOP_DELAY_S": "1.0", "CHILD_PORT": "30123", "CHILD_HOST": "placeholder"},
    )
    try:
        # the host's address is known only now: point the child at it through a drop-in
        host_address = client.host.address
        address_env = f'[Service]\nEnvironment="CHILD_HOST={host_address}"\n'
        await write_dropin(client, "10-addr.conf", address_env)
        await client.run("systemctl daemon-reload")
        await client.run(f"systemctl restart {UNIT}")
        url = f"http://{host_address}:30123/"
        async with aiohttp.ClientSession() as http:

            async def answers() -> bool:
                try:
                    async with http.get(url) as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False

            await eventually(answers)
            before = await client.show("MainPID", "InvocationID")
            started = time.monotonic()
            restart = asyncio.ensure_future(client.run(f"systemctl restart {UNIT}"))
            await asyncio.sleep(0.4)
            during = await client.show("ActiveState", "SubState", "Job", "MainPID")
            assert during["ActiveState"] == "deactivating" and during["SubState"] == "stop-sigterm"
            assert during["Job"].isdigit() and during["MainPID"] == before["MainPID"]
            async with http.get(url) as response:  # the OLD process still serves
                assert await response.text() == before["MainPID"]
            assert (await restart).exit_status == 0
            assert time.monotonic() - started >= 1.0
            after = await client.show("MainPID", "InvocationID", "ActiveState", "Job")
            assert after["MainPID"] != before["MainPID"] and not pid_alive(int(before["MainPID"]))
            assert after["InvocationID"] != before["InvocationID"]
            assert after["ActiveState"] == "active" and after["Job"] == ""
    finally:
        await client.host.stop()


async def test_killmode_process_leaves_children_running(tmp_path: Path, program: Path) -> None:
    client = await _host(tmp_path, program, env={"SPAWN_CHILD": "1"})
    try:
        await write_dropin(client, "50-kill.conf", "[Service]\nKillMode=process\n")
        await client.run("systemctl daemon-reload")
        await client.run(f"systemctl restart {UNIT}")
        pid = (await client.show("MainPID"))["MainPID"]
        await journal_shows(client, f"child {pid} up", "spawned ")
        assert (await client.run(f"systemctl stop {UNIT}")).exit_status == 0
        journal = await client.text(f"journalctl -u {UNIT} -o cat --no-pager")
        leftovers = [
            int(m) for m in re.findall(r"Unit process (\d+) \(python\w*\) remains running", journal)
        ]
        assert leftovers and all(pid_alive(pid) for pid in leftovers)
        assert (await client.show("ActiveState"))["ActiveState"] == "inactive"
        await client.run(f"systemctl start {UNIT}")
        journal = await client.text(f"journalctl -u {UNIT} -o cat --no-pager")
        assert f"Found left-over process {leftovers[0]} " in journal
    finally:
        await client.host.stop()
    assert not any(pid_alive(pid) for pid in leftovers)  # the host cleaned up by pid


async def test_stop_timeout_kills_with_sigkill(tmp_path: Path, program: Path) -> None:
    client = await _host(tmp_path, program, env={"IGNORE_TERM": "1"}, timeout_stop_s=1)
    try:
        pid = int((await client.show("MainPID"))["MainPID"])
        await journal_shows(client, f"child {pid} up")  # before it, SIGTERM meets the default
        started = time.monotonic()
        assert (await client.run(f"systemctl stop {UNIT}")).exit_status == 0
        assert time.monotonic() - started >= 1.0
        assert not pid_alive(pid)
        values = await client.show("ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
        assert values == {
            "ActiveState": "failed",
            "Result": "timeout",
            "ExecMainCode": "2",
            "ExecMainStatus": "9",
        }
        lines = (await client.text(f"journalctl -u {UNIT} -o cat")).splitlines()
        tail = lines[lines.index("Stopping Test child...") + 1 :]
        assert tail == [
            "ignoring SIGTERM",
            f"{UNIT}: State 'stop-sigterm' timed out. Killing.",
            f"{UNIT}: Killing process {pid} (python) with signal SIGKILL.",
            f"{UNIT}: Main process exited, code=killed, status=9/KILL",
            f"{UNIT}: Failed with result 'timeout'.",
            "Stopped Test child.",
        ] or tail[1].startswith(f"{UNIT}: State")
    finally:
        await client.host.stop()


async def test_start_limit_and_reset_failed(client: Client) -> None:
    for _ in range(4):  # the initial start + 4 restarts = 5 starts in 10 s
        assert (await client.run(f"systemctl restart {UNIT}")).exit_status == 0
    sixth = await client.run(f"systemctl restart {UNIT}")
    assert sixth.exit_status == 1
    assert sixth.stderr.decode() == (
        f"Job for {UNIT} failed because start of the service was attempted too often.\n"
        f'See "systemctl status {UNIT}" and "journalctl -xeu {UNIT}" for details.\n'
        f'To force a start use "systemctl reset-failed {UNIT}"\n'
        f'followed by "systemctl start {UNIT}" again.\n'
    )  # systemd 252's exact text (tests/realhost/test_fidelity.py holds it against the real one)
    values = await client.show("ActiveState", "Result", "MainPID")
    assert values == {"ActiveState": "failed", "Result": "start-limit-hit", "MainPID": "0"}
    is_failed = await client.run(f"systemctl is-failed {UNIT}")
    assert (is_failed.exit_status, is_failed.stdout) == (0, b"failed\n")
    assert (await client.run(f"systemctl reset-failed {UNIT}")).exit_status == 0
    assert (await client.run(f"systemctl start {UNIT}")).exit_status == 0
    is_active = await client.run(f"systemctl is-active {UNIT}")
    assert (is_active.exit_status, is_active.stdout) == (0, b"active\n")


async def test_crash_and_missing_binary(tmp_path: Path, program: Path) -> None:
    client = await _host(tmp_path, program, env={"EXIT_AT_START": "3"})
    try:
        await eventually(lambda: _state_is(client, "failed"))
        values = await client.show("Result", "ExecMainCode", "ExecMainStatus", "MainPID")
        assert values == {
            "Result": "exit-code",
            "ExecMainCode": "1",
            "ExecMainStatus": "3",
            "MainPID": "0",
        }
        journal = await client.text(f"journalctl -u {UNIT} -o cat")
        assert f"{UNIT}: Main process exited, code=exited, status=3/NOTIMPLEMENTED" in journal
        assert f"{UNIT}: Failed with result 'exit-code'." in journal
        inactive = await client.run(f"systemctl is-active {UNIT}")
        assert (inactive.exit_status, inactive.stdout) == (3, b"failed\n")

        missing_binary = "[Service]\nExecStart=\nExecStart=/nonexistent/bin\n"
        await write_dropin(client, "90-x.conf", missing_binary)
        await client.run("systemctl daemon-reload")
        assert (await client.run(f"systemctl start {UNIT}")).exit_status == 0  # Type=simple
        values = await client.show("ActiveState", "ExecMainStatus")
        assert values == {"ActiveState": "failed", "ExecMainStatus": "203"}
        unknown = await client.run("systemctl start nope.service")
        assert unknown.exit_status == 5
        assert unknown.stderr == b"Failed to start nope.service: Unit nope.service not found.\n"
    finally:
        await client.host.stop()


async def _state_is(client: Client, state: str) -> bool:
    return (await client.show("ActiveState"))["ActiveState"] == state


async def test_journal_json_shapes(tmp_path: Path, program: Path) -> None:
    client = await _host(tmp_path, program, env={"NOISE": "1"})
    try:

        async def noise_logged() -> bool:
            return "bad" in await client.text(f"journalctl -u {UNIT} -o cat -a")

        await eventually(noise_logged)
        out = await client.text(f"journalctl -u {UNIT} -o json --no-pager")
        entries = [json.loads(line) for line in out.splitlines()]
        service = [e for e in entries if e.get("_SYSTEMD_UNIT") == UNIT]
        for entry in entries:
            for key, value in entry.items():
                assert value is None or isinstance(value, str | list), (key, value)
        messages = [e["MESSAGE"] for e in service]
        assert list(b"\x1b[31mred\x1b[0m") in messages  # ANSI colours -> byte array
        assert list(b"bad \xff byte") in messages  # non-UTF-8 -> byte array
        assert None in messages  # the 5000-byte line is null without --all
        broken = [e for e in service if e.get("_LINE_BREAK") == "line-max"]
        assert len(broken) == 1 and broken[0]["MESSAGE"] is None
        first = service[0]
        invocation = (await client.show("InvocationID"))["InvocationID"]
        assert first["_SYSTEMD_INVOCATION_ID"] == invocation
        assert first["_PID"] == (await client.show("MainPID"))["MainPID"]
        assert first["_TRANSPORT"] == "stdout" and first["PRIORITY"] == "6"
        assert re.fullmatch(
            r"s=[0-9a-f]{32};i=[0-9a-f]+;b=[0-9a-f]{32};m=[0-9a-f]+;t=[0-9a-f]+;"
            r"x=[0-9a-f]+",
            first["__CURSOR"],
        )
        started = [e for e in entries if e["MESSAGE"] == "Started Test child."]
        assert (
            started[0]["_PID"] == "1"
            and started[0]["INVOCATION_ID"] == first["_SYSTEMD_INVOCATION_ID"]
        )
        full = await client.text(f"journalctl -u {UNIT} -o json --all")
        assert "x" * 5000 in full

        # resume by cursor: nothing lost, nothing repeated
        cursor = entries[-1]["__CURSOR"]
        await client.run(f"systemctl restart {UNIT}")
        later = await client.text(
            shlex.join(["journalctl", "-u", UNIT, "-o", "json", f"--after-cursor={cursor}"])
        )
        resumed = [json.loads(line) for line in later.splitlines()]
        everything = [
            json.loads(x) for x in (await client.text(f"journalctl -u {UNIT} -o json")).splitlines()
        ]
        combined = [e["__CURSOR"] for e in entries + resumed]
        assert combined == [e["__CURSOR"] for e in everything][: len(combined)]
        assert len(set(combined)) == len(combined)
        assert resumed[0]["MESSAGE"] == "Stopping Test child..."

        # one invocation: _SYSTEMD_INVOCATION_ID=X + INVOCATION_ID=X
        invocation = first["_SYSTEMD_INVOCATION_ID"]
        one = await client.openssh(
            f"journalctl -o json _SYSTEMD_INVOCATION_ID={invocation} + INVOCATION_ID={invocation}"
        )
        run_entries = [json.loads(line) for line in one.stdout.decode().splitlines()]
        assert {e.get("_SYSTEMD_INVOCATION_ID") or e.get("INVOCATION_ID") for e in run_entries} == {
            invocation
        }
        assert "Stopped Test child." in [e["MESSAGE"] for e in run_entries]

        await client.run(f"systemctl stop {UNIT}")  # nothing new from here on
        everything = [
            json.loads(x) for x in (await client.text(f"journalctl -u {UNIT} -o json")).splitlines()
        ]
        last_two = await client.text(f"journalctl -u {UNIT} -o json -n 2")
        assert [json.loads(x)["__CURSOR"] for x in last_two.splitlines()] == [
            e["__CURSOR"] for e in everything[-2:]
        ]
        assert everything[-1]["MESSAGE"] == "Stopped Test child."
        bad = await client.openssh(f"journalctl -u {UNIT} --after-cursor=garbage")
        assert (bad.returncode, bad.stderr) == (1, b"Failed to seek to cursor: Invalid argument\n")
        since = await client.text(f"journalctl -u {UNIT} -o json --since @{time.time() + 60:.3f}")
        assert since == ""
    finally:
        await client.host.stop()


async def test_journal_follow_streams_until_the_channel_closes(client: Client) -> None:
    async with await client.connect() as conn:
        follower = await conn.create_process(
            f"journalctl -u {UNIT} -f -o json --no-pager", encoding=None
        )
        initial = await asyncio.wait_for(follower.stdout.readline(), 5)
        assert json.loads(initial)["_SYSTEMD_UNIT"] in ("init.scope", UNIT)
        await conn.run(f"systemctl restart {UNIT}")
        seen: list[str] = []
        while "Started Test child." not in seen[1:]:
            line = await asyncio.wait_for(follower.stdout.readline(), 5)
            seen.append(json.loads(line)["MESSAGE"])
        assert "Stopping Test child..." in seen
        follower.terminate()
        await asyncio.wait_for(follower.wait_closed(), 5)


async def test_nvidia_smi_formats_and_release_lag(tmp_path: Path, program: Path) -> None:
    settings = HostSettings(gpu_count=2, memory_release_lag_s=1.0)
    client = await _host(tmp_path, program, env={"REGISTER_MIB": "80000"}, settings=settings)
    try:
        pid = (await client.show("MainPID"))["MainPID"]
        query = "nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,driver_version "
        query += "--format=csv,noheader,nounits"

        async def registered() -> bool:
            return ", 80003, " in await client.text(query)

        await eventually(registered)
        lines = (await client.text(query)).splitlines()
        uuids = [line.split(", ")[1] for line in lines]
        assert lines == [
            f"{i}, {uuids[i]}, NVIDIA RTX PRO 6000 Blackwell Server Edition, 80003, 97887, "
            "580.95.05"
            for i in range(2)
        ]
        assert all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", u) for u in uuids)
        apps_query = "nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory,process_name "
        apps_query += "--format=csv,noheader,nounits"
        apps = (await client.openssh(apps_query)).stdout.decode().splitlines()
        assert [line.split(", ")[:3] for line in apps] == [
            [uuids[0], pid, "80000"],
            [uuids[1], pid, "80000"],
        ]
        with_header = await client.text(
            "nvidia-smi --query-gpu=memory.used,index --format=csv -i 1"
        )
        assert with_header == "memory.used [MiB], index\n80003 MiB, 1\n"

        stopped_at = time.monotonic()  # before the stop: a late return cannot shorten the lag
        await client.run(f"systemctl stop {UNIT}")
        assert await client.text(apps_query) == ""  # nothing at all once the process is gone
        assert ", 80003, " in await client.text(query)  # ... but memory is still held (lag)

        async def released() -> bool:
            return all(", 3, " in line for line in (await client.text(query)).splitlines())

        await eventually(released, timeout=5, interval=0.05)
        assert time.monotonic() - stopped_at >= 0.8

        bad = await client.run("nvidia-smi --query-gpu=bogus --format=csv")
        assert bad.exit_status == 2 and b'Field "bogus" is not a valid field' in bad.stdout
        no_gpu = await client.run("nvidia-smi --query-gpu=index --format=csv -i 7")
        assert (no_gpu.exit_status, no_gpu.stdout) == (6, b"No devices were found\n")
    finally:
        await client.host.stop()


async def test_max_sessions_per_connection(client: Client) -> None:
    async with await client.connect() as conn:
        followers = [
            await conn.create_process(f"journalctl -u {UNIT} -f", encoding=None) for _ in range(10)
        ]
        with pytest.raises(asyncssh.ChannelOpenError) as refused:
            await conn.run("true")
        assert refused.value.code == asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED
        followers[0].terminate()
        await followers[0].wait_closed()
        assert (await conn.run("true")).exit_status == 0
        for follower in followers[1:]:
            follower.close()
    async with await client.connect() as other:  # a second connection has its own 10
        assert (await other.run("id -u")).stdout == "0\n"


async def test_unknown_commands_and_command_lists(client: Client) -> None:
    missing = await client.openssh("frobnicate --now")
    assert (missing.returncode, missing.stderr) == (
        127,
        b"bash: line 1: frobnicate: command not found\n",
    )
    listed = await client.openssh("id -u && false || echo fallback; test -e /etc/systemd/system")
    assert (listed.returncode, listed.stdout) == (0, b"0\nfallback\n")
    df = await client.text("df -B1 --output=avail /")
    header, value = df.splitlines()
    assert header.strip() == "Avail" and int(value) > 0
