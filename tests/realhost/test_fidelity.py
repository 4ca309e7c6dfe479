"""Fidelity: the same scenario on the simulated host and on a REAL systemd + journald + sshd host,
compared as the orchestrator observes them (over OpenSSH, the same commands, the same unit text).

Each scenario runs on both hosts at once and returns an *observation*: the outputs with the
values that differ between any two runs (pids, invocation ids, timestamps, cgroup paths)
replaced by their shape. The two observations must be equal, and each test also asserts the
absolute facts (FACTS.md) so that two hosts agreeing on a wrong answer still fail.

Known differences of the real-systemd TEST host from a PID-1 host (FACTS.md: systemd) are not
compared; there the simulator follows the PID-1 host: no ``_SYSTEMD_INVOCATION_ID`` on service
lines, and systemd's own lines ("Started", "remains running") are not in ``journalctl -u``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import asyncssh
import pytest

from orchestrator.sim.faults import HostSettings
from orchestrator.sim.host import SimHost, SimHostConfig
from tests.integration.daemon_proc import free_port
from tests.integration.test_sim_support import CHILD_PROGRAM
from tests.realhost.realhost import RealHost

SIM_ADDRESSES = iter(f"127.0.0.{n}" for n in range(152, 160))
SHOW = [
    "Type", "Restart", "TimeoutStopUSec", "MainPID", "Result", "NRestarts",
    "ExecMainStartTimestamp", "ExecMainStartTimestampMonotonic",
    "ExecMainExitTimestampMonotonic", "ExecMainPID", "ExecMainCode", "ExecMainStatus",
    "ExecStart", "ControlGroup", "Environment", "KillMode", "Id", "LoadState", "ActiveState",
    "SubState", "FragmentPath", "DropInPaths", "Job", "NeedDaemonReload", "LoadError",
    "InvocationID",
]  # fmt: skip
ONLY_ON_PID1_HOSTS = {"_SYSTEMD_INVOCATION_ID"}
"""Journal fields the real-systemd test host cannot produce (FACTS.md); the simulator has them."""


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")


class Side(Protocol):
    """One host as a scenario sees it: a shell over OpenSSH and its /etc/systemd/system."""

    label: str
    unit_dir: Path
    address: str
    port: int
    identity: Path
    known_hosts: Path

    async def sh(self, *argv: str) -> Ran: ...


def _openssh(side: Side, argv: tuple[str, ...]) -> Ran:
    command = [
        "ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
        "-o", f"UserKnownHostsFile={side.known_hosts}", "-o", "StrictHostKeyChecking=yes",
        "-i", str(side.identity), "-p", str(side.port), f"root@{side.address}",
        shlex.join(argv),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, timeout=60, check=False)
    return Ran(done.returncode, done.stdout, done.stderr)


@dataclass
class RealSide:
    host: RealHost
    label: str = "real"

    @property
    def unit_dir(self) -> Path:
        return self.host.unit_dir

    @property
    def address(self) -> str:
        return self.host.address

    @property
    def port(self) -> int:
        return self.host.port

    @property
    def identity(self) -> Path:
        return self.host.identity_file

    @property
    def known_hosts(self) -> Path:
        return self.host.known_hosts

    async def sh(self, *argv: str) -> Ran:
        return await asyncio.to_thread(_openssh, self, argv)


@dataclass
class SimSide:
    host: SimHost
    identity: Path
    known_hosts: Path
    label: str = "sim"

    @property
    def unit_dir(self) -> Path:
        return self.host.root / "etc/systemd/system"

    @property
    def address(self) -> str:
        return self.host.address

    @property
    def port(self) -> int:
        return self.host.port

    async def sh(self, *argv: str) -> Ran:
        return await asyncio.to_thread(_openssh, self, argv)


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimSide]:
    """A simulated host whose own SGLang unit stays stopped (scenarios add their units)."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    identity = tmp_path / "sim_id_ed25519"
    key.write_private_key(str(identity))
    identity.chmod(0o600)
    authorized = tmp_path / "sim_authorized_keys"
    authorized.write_text(key.export_public_key().decode())
    address = next(SIM_ADDRESSES, "127.0.0.159")
    host = SimHost(
        SimHostConfig(
            name="orch-fid-sim",
            address=address,
            port=free_port(address),
            directory=tmp_path / "sim",
            authorized_keys=authorized,
            settings=HostSettings(unit_running=False),
        )
    )
    await host.start()
    known_hosts = tmp_path / "sim_known_hosts"
    known_hosts.write_text(host.known_hosts_line() + "\n")
    try:
        yield SimSide(host, identity, known_hosts)
    finally:
        await host.stop()


@pytest.fixture
def real(fidelity_host: RealHost) -> RealSide:
    return RealSide(fidelity_host)


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unit's program (both hosts see this path): behaviour chosen by Environment=."""
    path = tmp_path_factory.mktemp("fidelity-program") / "child.py"
    path.write_text(CHILD_PROGRAM)
    return path


_UNIT_SERIAL = iter(range(1, 10_000))


def unit_name(stem: str) -> str:
    """A unit name used once in this session (the real host is shared by the module)."""
    return f"fid-{stem}-{next(_UNIT_SERIAL)}.service"


def unit_text(program: Path, *, env: dict[str, str] | None = None, extra: str = "") -> str:
    lines = "".join(f'Environment="{k}={v}"\n' for k, v in (env or {}).items())
    return (
        "[Unit]\nDescription=Fidelity probe\n\n[Service]\nType=simple\n"
        f"ExecStart={sys.executable} {program}\n{lines}KillMode=control-group\n"
        f"TimeoutStopSec=5\n{extra}"
    )


async def install(side: Side, name: str, text: str) -> None:
    (side.unit_dir / name).write_text(text)
    ran = await side.sh("systemctl", "daemon-reload")
    assert ran.returncode == 0, ran


async def both(
    real: RealSide, sim: SimSide, scenario: Callable[[Side], Awaitable[Any]]
) -> tuple[Any, Any]:
    """Run ``scenario`` on the two hosts at once."""
    got_real, got_sim = await asyncio.gather(scenario(real), scenario(sim))
    return got_real, got_sim


# --- normalising what differs between any two runs ---------------------------------------------

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_TIMESTAMP = re.compile(r"^[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]+$")


def _shape_exec(value: str) -> str:
    value = re.sub(r"pid=[1-9]\d*", "pid=<pid>", value)
    return re.sub(r"_time=\[[^\]]*\d[^\]]*\]", "_time=[<ts>]", value)


def shape_value(key: str, value: str) -> str:
    if value == "":
        return ""
    if key in ("MainPID", "ExecMainPID") and value != "0":
        return "<pid>"
    if key == "InvocationID":
        return "<id>" if _HEX32.match(value) else f"<bad id {value}>"
    if key.endswith("Monotonic") and value != "0":
        return "<mono>"
    if key.endswith("Timestamp"):
        return "<ts>" if _TIMESTAMP.match(value) else f"<bad ts {value}>"
    if key == "ControlGroup":
        return "<cgroup>"
    if key == "ExecStart":
        return _shape_exec(value)
    return value


def show_lines(text: str) -> list[tuple[str, str]]:
    return [tuple(line.split("=", 1)) for line in text.splitlines()]  # type: ignore[misc]


async def show(side: Side, name: str, props: list[str] = SHOW) -> list[tuple[str, str]]:
    """``systemctl show -p ...`` as (key, shape) in the order systemd printed them."""
    ran = await side.sh("systemctl", "show", "-p", ",".join(props), name)
    assert ran.returncode == 0 and ran.stderr == b"", ran
    return [(key, shape_value(key, value)) for key, value in show_lines(ran.text)]


def _differences(real: Any, sim: Any) -> Any:
    """Only the lines that differ, to read a failure at a glance."""
    if isinstance(real, list) and isinstance(sim, list):
        return {"real": [x for x in real if x not in sim], "sim": [x for x in sim if x not in real]}
    return {"real": real, "sim": sim}


def raw_show(lines: list[tuple[str, str]]) -> dict[str, str]:
    return dict(lines)


async def wait_for(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


async def main_pid(side: Side, name: str) -> int:
    ran = await side.sh("systemctl", "show", "-p", "MainPID", name)
    return int(ran.text.strip().split("=", 1)[1])


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


# --- scenarios --------------------------------------------------------------------------------


async def test_systemctl_show_fields_formats_and_order(
    real: RealSide, sim: SimSide, program: Path
) -> None:
    ok, crash = unit_name("show"), unit_name("crash")

    async def scenario(side: Side) -> dict[str, Any]:
        await install(side, ok, unit_text(program, env={"A": "b c", "D": "$x"}))
        await install(side, crash, unit_text(program, env={"EXIT_AT_START": "3"}))
        seen: dict[str, Any] = {"loaded": await show(side, ok)}
        shuffled = list(reversed(SHOW))
        seen["order_independent"] = await show(side, ok, shuffled) == seen["loaded"]
        seen["unknown_property"] = await show(side, ok, ["Bogus", "LoadState"])
        assert (await side.sh("systemctl", "start", ok)).returncode == 0
        await wait_for(lambda: _logged(side, ok, "up"))
        seen["active"] = await show(side, ok)
        assert (await side.sh("systemctl", "stop", ok)).returncode == 0
        seen["stopped"] = await show(side, ok)
        assert (await side.sh("systemctl", "start", crash)).returncode == 0  # Type=simple
        await wait_for(lambda: _state(side, crash, "failed"))
        seen["crashed"] = await show(side, crash)
        seen["not_found"] = await show(side, "fid-missing.service")
        return seen

    got_real, got_sim = await both(real, sim, scenario)
    for key in got_real:
        assert got_sim[key] == got_real[key], (key, _differences(got_real[key], got_sim[key]))
    loaded = raw_show(got_real["loaded"])
    assert [k for k, _ in got_real["loaded"]] == [k for k in SHOW if k != "ExecMainExitTimestamp"]
    assert loaded["InvocationID"] == "" and loaded["MainPID"] == "0"
    assert loaded["Environment"] == '"A=b c" "D=\\$x"'
    assert got_real["order_independent"] is True
    assert got_real["unknown_property"] == [("LoadState", "loaded")]
    active = raw_show(got_real["active"])
    assert (active["ActiveState"], active["SubState"], active["InvocationID"]) == (
        "active",
        "running",
        "<id>",
    )
    crashed = raw_show(got_real["crashed"])
    assert (crashed["Result"], crashed["ExecMainCode"], crashed["ExecMainStatus"]) == (
        "exit-code",
        "1",
        "3",
    )
    assert raw_show(got_real["not_found"])["LoadState"] == "not-found"


async def _logged(side: Side, name: str, needle: str) -> bool:
    ran = await side.sh("journalctl", "-u", name, "-o", "cat", "--no-pager")
    return needle in ran.text


async def _state(side: Side, name: str, state: str) -> bool:
    ran = await side.sh("systemctl", "show", "-p", "ActiveState", name)
    return ran.text.strip() == f"ActiveState={state}"


def _journal_shape(entry: dict[str, Any]) -> dict[str, Any]:
    message = entry.get("MESSAGE")
    kind = "null" if message is None else "bytes" if isinstance(message, list) else "str"
    return {
        "message": kind,
        "value": bytes(message)
        if isinstance(message, list)
        else re.sub(r"\d+", "N", message or ""),
        "line_break": entry.get("_LINE_BREAK"),
        "all_strings": all(isinstance(v, str | list) or v is None for v in entry.values()),
    }


async def test_journal_json_shapes(real: RealSide, sim: SimSide, program: Path) -> None:
    name = unit_name("journal")

    async def scenario(side: Side) -> dict[str, Any]:
        await install(side, name, unit_text(program, env={"NOISE": "1"}))
        await side.sh("systemctl", "start", name)
        await wait_for(lambda: _logged(side, name, "bad"))
        ran = await side.sh("journalctl", "-u", name, "-o", "json", "--no-pager")
        entries = [json.loads(line) for line in ran.stdout.splitlines()]
        service = [e for e in entries if e.get("_TRANSPORT") == "stdout"]
        full = await side.sh("journalctl", "-u", name, "-o", "json", "--all", "--no-pager")
        lengths = [
            len(e["MESSAGE"])
            for e in map(json.loads, full.stdout.splitlines())
            if e.get("_TRANSPORT") == "stdout"
        ]
        cursor = service[0]["__CURSOR"]
        after = await side.sh(
            "journalctl", "-u", name, "-o", "json", "--no-pager", f"--after-cursor={cursor}"
        )
        after_service = [
            e for e in map(json.loads, after.stdout.splitlines()) if e.get("_TRANSPORT") == "stdout"
        ]
        bad_cursor = await side.sh("journalctl", "-u", name, "--after-cursor=garbage")
        await side.sh("systemctl", "stop", name)
        return {
            "shapes": [_journal_shape(e) for e in service],
            "keys": sorted(set().union(*map(set, service)) - ONLY_ON_PID1_HOSTS),
            "full_lengths": lengths,
            "after_cursor": [e["__CURSOR"] for e in after_service]
            == [e["__CURSOR"] for e in service[1:]],
            "bad_cursor_rc": bad_cursor.returncode,
            "unit_field": {e["_SYSTEMD_UNIT"] for e in service},
        }

    got_real, got_sim = await both(real, sim, scenario)
    assert got_sim == got_real
    shapes = got_real["shapes"]
    assert [s["message"] for s in shapes] == ["str", "bytes", "null", "null", "str", "bytes"]
    assert shapes[1]["value"] == b"\x1b[31mred\x1b[0m" and shapes[5]["value"] == b"bad \xff byte"
    assert [s["line_break"] for s in shapes] == [None, None, None, "line-max", None, None]
    assert got_real["full_lengths"][2:5] == [5000, 48 * 1024, 10]
    assert got_real["after_cursor"] is True
    assert got_real["bad_cursor_rc"] == 1
    assert got_real["unit_field"] == {name}


async def test_dropin_merge_and_the_missing_reset(
    real: RealSide, sim: SimSide, program: Path
) -> None:
    name = unit_name("dropin")
    props = ["MainPID", "ExecStart", "LoadState", "ActiveState", "DropInPaths", "NeedDaemonReload"]

    def exec_argv(lines: list[tuple[str, str]]) -> str:
        return re.sub(r" ; ignore_errors.*", "", raw_show(lines)["ExecStart"])

    async def scenario(side: Side) -> dict[str, Any]:
        await install(side, name, unit_text(program))
        await side.sh("systemctl", "start", name)
        seen: dict[str, Any] = {}
        dropins = side.unit_dir / f"{name}.d"
        dropins.mkdir()
        ours = f'[Service]\nExecStart=\nExecStart="{sys.executable}" "{program}" "--ours"\n'
        (dropins / "90-orchestrator.conf").write_text(ours)
        seen["new_dir_needs_reload"] = raw_show(await show(side, name, props))["NeedDaemonReload"]
        await side.sh("systemctl", "daemon-reload")
        seen["ours"] = exec_argv(await show(side, name, props))
        admin = f"[Service]\nExecStart=\nExecStart={sys.executable} {program} --admin\n"
        (dropins / "99-admin.conf").write_text(admin)
        seen["changed_needs_reload"] = raw_show(await show(side, name, props))["NeedDaemonReload"]
        await side.sh("systemctl", "daemon-reload")
        merged = await show(side, name, props)
        seen["admin_wins"] = exec_argv(merged)
        seen["dropin_paths"] = raw_show(merged)["DropInPaths"]
        (dropins / "99-admin.conf").unlink()
        (dropins / "90-orchestrator.conf").write_text(ours.replace("ExecStart=\n", ""))
        await side.sh("systemctl", "daemon-reload")
        old = await main_pid(side, name)
        restart = await side.sh("systemctl", "restart", name)
        after = raw_show(await show(side, name, props))
        seen["bad"] = {
            "LoadState": after["LoadState"],
            "ActiveState": after["ActiveState"],
            "restart_rc": restart.returncode,
            "stderr": restart.stderr.decode(),
            "same_pid": await main_pid(side, name) == old,
            "old_alive": alive(old),
        }
        await side.sh("systemctl", "stop", name)
        return seen

    got_real, got_sim = await both(real, sim, scenario)
    assert got_sim == got_real
    assert got_real["new_dir_needs_reload"] == "no"  # FACTS: the first drop-in goes unnoticed
    assert got_real["changed_needs_reload"] == "yes"
    assert got_real["ours"].endswith(f"argv[]={sys.executable} {program} --ours")
    assert got_real["admin_wins"].endswith(f"argv[]={sys.executable} {program} --admin")
    bad = got_real["bad"]
    assert (bad["LoadState"], bad["ActiveState"], bad["restart_rc"]) == ("bad-setting", "active", 1)
    assert "has a bad unit file setting" in bad["stderr"]
    assert bad["same_pid"] and bad["old_alive"]


async def test_restart_waits_for_a_slow_stop(real: RealSide, sim: SimSide, program: Path) -> None:
    name = unit_name("slowstop")
    delay = 1.5

    async def scenario(side: Side) -> dict[str, Any]:
        await install(side, name, unit_text(program, env={"STOP_DELAY_S": str(delay)}))
        await side.sh("systemctl", "start", name)
        await wait_for(lambda: _logged(side, name, "up"))
        old = await main_pid(side, name)
        began = time.monotonic()
        ran = await side.sh("systemctl", "restart", name)
        took = time.monotonic() - began
        new = await main_pid(side, name)
        seen = {
            "rc": ran.returncode,
            "waited": delay <= took < delay + 3.0,
            "old_gone": not alive(old),
            "new_pid": new not in (0, old),
            "state": raw_show(await show(side, name, ["ActiveState", "SubState", "Result"])),
        }
        await side.sh("systemctl", "stop", name)
        return seen

    got_real, got_sim = await both(real, sim, scenario)
    assert got_sim == got_real
    assert got_real == {
        "rc": 0,
        "waited": True,
        "old_gone": True,
        "new_pid": True,
        "state": {"ActiveState": "active", "SubState": "running", "Result": "success"},
    }


async def test_killmode_process_leaves_children(
    real: RealSide, sim: SimSide, program: Path
) -> None:
    name = unit_name("killmode")
    leftovers: list[int] = []

    async def scenario(side: Side) -> dict[str, Any]:
        text = unit_text(program, env={"SPAWN_CHILD": "1"}).replace(
            "KillMode=control-group", "KillMode=process"
        )
        await install(side, name, text)
        await side.sh("systemctl", "start", name)
        main = await main_pid(side, name)
        await wait_for(lambda: _has_children(main))
        child = children_of(main)[0]
        leftovers.append(child)
        ran = await side.sh("systemctl", "stop", name)
        after = raw_show(await show(side, name, ["MainPID", "ActiveState", "SubState", "Result"]))
        seen = {
            "rc": ran.returncode,
            "main_gone": not alive(main),
            "child_alive": alive(child),
            "after": after,
        }
        await side.sh("systemctl", "start", name)
        seen["started_again"] = raw_show(await show(side, name, ["ActiveState"]))
        seen["child_still_alive"] = alive(child)
        await side.sh("systemctl", "stop", name)
        return seen

    try:
        got_real, got_sim = await both(real, sim, scenario)
    finally:
        for pid in leftovers:
            _kill(pid)
    assert got_sim == got_real
    assert got_real["main_gone"] and got_real["child_alive"] and got_real["child_still_alive"]
    assert got_real["after"] == {
        "MainPID": "0", "ActiveState": "inactive", "SubState": "dead", "Result": "success"
    }  # fmt: skip
    assert got_real["started_again"] == {"ActiveState": "active"}


async def _has_children(pid: int) -> bool:
    return bool(children_of(pid))


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


async def test_start_limit_hit(real: RealSide, sim: SimSide, program: Path) -> None:
    name = unit_name("limit")

    async def scenario(side: Side) -> dict[str, Any]:
        await install(side, name, unit_text(program))
        codes, last = [], Ran(0, b"", b"")
        for _ in range(6):
            last = await side.sh("systemctl", "restart", name)
            codes.append(last.returncode)
        state = raw_show(await show(side, name, ["MainPID", "ActiveState", "Result"]))
        reset = await side.sh("systemctl", "reset-failed", name)
        again = await side.sh("systemctl", "start", name)
        seen = {
            "codes": codes,
            "stderr": last.stderr.decode().replace("--user ", ""),
            "state": state,
            "reset_rc": reset.returncode,
            "again_rc": again.returncode,
        }
        await side.sh("systemctl", "stop", name)
        return seen

    got_real, got_sim = await both(real, sim, scenario)
    assert got_sim == got_real
    assert got_real["codes"] == [0, 0, 0, 0, 0, 1]
    assert "start of the service was attempted too often" in got_real["stderr"]
    assert got_real["state"] == {
        "MainPID": "0", "ActiveState": "failed", "Result": "start-limit-hit"
    }  # fmt: skip
    assert (got_real["reset_rc"], got_real["again_rc"]) == (0, 0)


async def test_max_sessions_per_connection(real: RealSide, sim: SimSide, program: Path) -> None:
    name = unit_name("sessions")

    async def scenario(side: Side) -> dict[str, int]:
        await install(side, name, unit_text(program))
        async with asyncssh.connect(
            side.address,
            side.port,
            username="root",
            client_keys=[str(side.identity)],
            known_hosts=str(side.known_hosts),
            config=None,
            connect_timeout=5,
        ) as conn:
            follow = f"journalctl -u {name} -f --no-pager"
            results = await asyncio.gather(
                *(conn.create_process(follow, encoding=None) for _ in range(12)),
                return_exceptions=True,
            )
            opened = [r for r in results if isinstance(r, asyncssh.SSHClientProcess)]
            refused = [r for r in results if isinstance(r, asyncssh.ChannelOpenError)]
            for process in opened:
                process.close()
            return {"opened": len(opened), "refused": len(refused)}

    got_real, got_sim = await both(real, sim, scenario)
    assert got_sim == got_real == {"opened": 10, "refused": 2}
