"""Local mode's systemd control over D-Bus, against a private ``dbus-daemon`` with a stand-in
``org.freedesktop.systemd1`` (``fake_systemd1.py``, its own process) whose units are real child
processes; and, where this machine has a system bus with systemd on it, read-only against the
real manager."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dbus_fast import Message, MessageType
from dbus_fast.aio import MessageBus
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.host.connect import LocalGpuProbe, LocalUnitControl, nvml_missing
from orchestrator.host.dbus import (
    DEFAULT_SYSTEM_BUS_ADDRESS,
    BusCallFailed,
    BusUnavailable,
    BusUnitControl,
    SystemdBus,
    bus_label_escape,
    bus_label_unescape,
    show_properties,
    system_bus_address,
    unit_name_from_path,
    unit_object_path,
)
from orchestrator.host.handle import HostHandle
from orchestrator.host.local import LocalTransport
from orchestrator.host.systemd import SystemdError, merged_service, shown_exec_argv, unit_state
from orchestrator.host.unitcontrol import JobFailed, JobTimeout, UnitControl
from tests.sysdeps import apt_install

REPO = Path(__file__).resolve().parents[2]
SYSTEM_BUS_SOCKET = Path("/run/dbus/system_bus_socket")
T = 10.0
SESSION_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""
QUOTED_ARGV = ["/usr/bin/env", "two words", 'a "quoted" $HOME %n', "--flag=x y"]


# --- fixtures ------------------------------------------------------------------------------


def _ensure_dbus_daemon() -> str:
    """The Debian ``dbus-daemon`` binary, installed here if this machine lacks it."""
    found = shutil.which("dbus-daemon")
    if found is None:
        apt_install("dbus-daemon")
        found = shutil.which("dbus-daemon")
    assert found is not None, "dbus-daemon not installable"
    return found


def _stop(process: subprocess.Popen[bytes], within: float = 5.0) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(within)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(within)


def _first_line(process: subprocess.Popen[bytes], within: float) -> str:
    """The process's first stdout line, or fail if it does not come within ``within`` s."""
    assert process.stdout is not None
    result: list[bytes] = []

    def read() -> None:
        assert process.stdout is not None
        result.append(process.stdout.readline())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(within)
    if not result or not result[0]:
        raise AssertionError(f"{process.args!r} printed nothing within {within}s")
    return result[0].decode().strip()


def _start_bus(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A private ``dbus-daemon`` of type session (``--session`` means the system-wide
    session.conf, which cannot be combined with our own config) and its address."""
    binary = _ensure_dbus_daemon()
    config = directory / "session.conf"
    config.write_text(SESSION_CONFIG.format(socket=directory / "bus"))
    process = subprocess.Popen(
        [binary, "--print-address", "--nofork", f"--config-file={config}"],
        stdout=subprocess.PIPE,
    )
    try:
        return process, _first_line(process, within=T)
    except BaseException:
        _stop(process)
        raise


def _start_fake(address: str, units_file: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.fake_systemd1",
            "--address",
            address,
            "--units",
            str(units_file),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    try:
        assert _first_line(process, within=T) == "ready"
    except BaseException:
        _stop(process)
        raise
    return process


@pytest.fixture(scope="module")
def private_bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One private bus for the module's tests; stopped by pid after."""
    process, address = _start_bus(tmp_path_factory.mktemp("dbus"))
    try:
        yield address
    finally:
        _stop(process)


@dataclass
class FakeSystemd:
    address: str
    units_file: Path
    units: dict[str, dict[str, Any]]

    async def control(self, member: str, signature: str = "", *body: Any) -> list[Any]:
        """Call the stand-in's test control interface."""
        bus = await MessageBus(bus_address=self.address).connect()
        try:
            reply = await bus.call(
                Message(
                    destination="org.freedesktop.systemd1",
                    path="/org/orchestrator/test",
                    interface="org.orchestrator.test.FakeSystemd1",
                    member=member,
                    signature=signature,
                    body=list(body),
                )
            )
        finally:
            bus.disconnect()
        assert reply.message_type is MessageType.METHOD_RETURN, reply.body
        return list(reply.body)

    def rewrite_units(self) -> None:
        self.units_file.write_text(json.dumps(self.units))
        stat = self.units_file.stat()  # a new mtime even within the clock's granularity
        os.utime(self.units_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def _units() -> dict[str, dict[str, Any]]:
    return {
        "sglang.service": {
            "argv": ["/bin/sleep", "60"],
            "fragment_path": "/etc/systemd/system/sglang.service",
            "drop_in_paths": [
                "/etc/systemd/system/sglang.service.d/90-orchestrator.conf",
                "/run/systemd/system/sglang.service.d/zz.conf",
            ],
            "kill_mode": "control-group",
            "timeout_stop_usec": 3_000_000,
        },
        "other.service": {"argv": ["/bin/sleep", "60"]},
        "quoted.service": {"argv": QUOTED_ARGV, "type": "exec", "timeout_stop_usec": 2**64 - 1},
        "crash.service": {"argv": ["/bin/sh", "-c", "exit 3"]},
        "missing.service": {"argv": ["/nonexistent/orchestrator-test-binary"]},
    }


@pytest.fixture
def fake_systemd(private_bus: str, tmp_path: Path) -> Iterator[FakeSystemd]:
    units = _units()
    units_file = tmp_path / "units.json"
    units_file.write_text(json.dumps(units))
    process = _start_fake(private_bus, units_file)
    try:
        yield FakeSystemd(private_bus, units_file, units)
    finally:
        _stop(process)


@pytest.fixture
async def systemd_bus(fake_systemd: FakeSystemd) -> AsyncIterator[SystemdBus]:
    bus = SystemdBus(fake_systemd.address, name="test")
    await bus.connect(timeout=T)
    yield bus
    await bus.close()


def _process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.decode().partition("=") for item in raw.split(b"\0") if item)
    return {key: value for key, _, value in pairs}


async def _state_until(bus: SystemdBus, unit: str, active_state: str, within: float = T) -> Any:
    deadline = time.monotonic() + within
    while True:
        state = await bus.unit_state(unit, timeout=T)
        if state.active_state == active_state:
            return state
        assert time.monotonic() < deadline, f"{unit} stayed {state.active_state}"
        await asyncio.sleep(0.05)


# --- pure ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path"),
    [
        # Paths as the real manager publishes them (busctl tree org.freedesktop.systemd1).
        ("dbus.service", "/org/freedesktop/systemd1/unit/dbus_2eservice"),
        ("systemd-journald.service", "/org/freedesktop/systemd1/unit/systemd_2djournald_2eservice"),
        ("getty@tty1.service", "/org/freedesktop/systemd1/unit/getty_40tty1_2eservice"),
        ("-.slice", "/org/freedesktop/systemd1/unit/_2d_2eslice"),
        ("dev-sda1.device", "/org/freedesktop/systemd1/unit/dev_2dsda1_2edevice"),
        ("sglang_v2.service", "/org/freedesktop/systemd1/unit/sglang_5fv2_2eservice"),
        ("1st.service", "/org/freedesktop/systemd1/unit/_31st_2eservice"),
        ("a1.service", "/org/freedesktop/systemd1/unit/a1_2eservice"),
        ("é.service", "/org/freedesktop/systemd1/unit/_c3_a9_2eservice"),
        ("", "/org/freedesktop/systemd1/unit/_"),
    ],
)
def test_unit_object_path_escapes_like_sd_bus_path_encode(name: str, path: str) -> None:
    assert unit_object_path(name) == path
    assert unit_name_from_path(path) == name


@given(st.text(min_size=1))
def test_bus_label_escape_round_trips_and_is_a_valid_path_element(label: str) -> None:
    escaped = bus_label_escape(label)
    assert all(c.isascii() and (c.isalnum() or c == "_") for c in escaped)
    assert not escaped[0].isdigit()
    assert bus_label_unescape(escaped) == label


def test_show_properties_gives_systemctl_strings() -> None:
    invocation = bytes(range(16))
    shown = show_properties(
        {
            "LoadState": "loaded",
            "ActiveState": "active",
            "SubState": "running",
            "Result": "success",
            "MainPID": 4242,
            "InvocationID": invocation,
            "ExecMainStatus": 0,
            "ExecMainCode": 0,
            "NRestarts": 2,
            "Job": [17, "/org/freedesktop/systemd1/job/17"],
            "NeedDaemonReload": False,
            "DropInPaths": ["/etc/a.conf", "/run/b.conf"],
            "FragmentPath": "/etc/systemd/system/x.service",
            "KillMode": "control-group",
            "TimeoutStopUSec": 90_000_000,
            "Type": "notify",
            "ExecStart": [["/bin/x", ["/bin/x", "a b"], False, 0, 0, 0, 0, 0, 0, 0]],
            "Unrelated": "ignored",
        }
    )
    state = unit_state(shown)
    assert state.invocation_id == invocation.hex() == "000102030405060708090a0b0c0d0e0f"
    assert state.job == "17"
    assert state.main_pid == 4242
    assert state.need_daemon_reload is False
    assert state.drop_in_paths == ("/etc/a.conf", "/run/b.conf")
    assert state.timeout_stop_s == 90.0
    assert state.exec_start_shown is not None
    assert shown_exec_argv(state.exec_start_shown) == "/bin/x a b"
    assert "Unrelated" not in shown

    idle = unit_state(
        show_properties(
            {"InvocationID": b"", "Job": [0, "/"], "MainPID": 0, "TimeoutStopUSec": 2**64 - 1}
        )
    )
    assert idle.invocation_id is None and idle.job is None and idle.main_pid is None
    assert idle.timeout_stop_s == float("inf")


# --- against the stand-in manager ----------------------------------------------------------


async def test_unit_state_and_exact_argv(systemd_bus: SystemdBus) -> None:
    state = await systemd_bus.unit_state("sglang.service", timeout=T)
    assert (state.load_state, state.active_state, state.sub_state) == ("loaded", "inactive", "dead")
    assert state.invocation_id is None and state.main_pid is None and state.job is None
    assert state.fragment_path == "/etc/systemd/system/sglang.service"
    assert state.drop_in_paths == (
        "/etc/systemd/system/sglang.service.d/90-orchestrator.conf",
        "/run/systemd/system/sglang.service.d/zz.conf",
    )
    assert (state.kill_mode, state.type, state.timeout_stop_s) == ("control-group", "simple", 3.0)
    assert state.need_daemon_reload is False

    # The exact argv, where systemctl show would join it ambiguously.
    assert await systemd_bus.exec_start("quoted.service", timeout=T) == QUOTED_ARGV
    quoted = await systemd_bus.unit_state("quoted.service", timeout=T)
    assert quoted.timeout_stop_s == float("inf") and quoted.type == "exec"
    assert await systemd_bus.get_unit("quoted.service") == unit_object_path("quoted.service")


async def test_start_and_stop_drive_a_real_process(systemd_bus: SystemdBus) -> None:
    await systemd_bus.start("sglang.service", timeout=T)
    first = await systemd_bus.unit_state("sglang.service", timeout=T)
    assert (first.active_state, first.sub_state) == ("active", "running")
    assert first.main_pid is not None and _process_alive(first.main_pid)
    assert first.invocation_id is not None and len(first.invocation_id) == 32
    # The ay InvocationID's hex is what the service sees in its environment, as under systemd.
    assert _environ(first.main_pid)["INVOCATION_ID"] == first.invocation_id

    await systemd_bus.stop("sglang.service", timeout=T)
    stopped = await systemd_bus.unit_state("sglang.service", timeout=T)
    assert (stopped.active_state, stopped.main_pid) == ("inactive", None)
    assert not _process_alive(first.main_pid)  # stop returned only once it was gone

    await systemd_bus.restart("sglang.service", timeout=T)
    second = await systemd_bus.unit_state("sglang.service", timeout=T)
    assert second.active_state == "active"
    assert second.invocation_id not in (None, first.invocation_id)
    assert second.main_pid not in (None, first.main_pid)
    await systemd_bus.stop("sglang.service", timeout=T)


async def test_job_wait_ignores_another_jobs_job_removed(
    systemd_bus: SystemdBus, fake_systemd: FakeSystemd
) -> None:
    """A JobRemoved for the same unit but another job (result ``failed``) arrives first: the
    wait goes on until THIS job's JobRemoved, which says ``done``."""
    await fake_systemd.control("SetJobDelay", "sd", "sglang.service", 0.4)
    await fake_systemd.control("ForeignJobRemovedFirst", "ss", "sglang.service", "failed")
    begun = time.monotonic()
    await systemd_bus.start("sglang.service", timeout=T)
    assert time.monotonic() - begun >= 0.4
    state = await systemd_bus.unit_state("sglang.service", timeout=T)
    assert state.active_state == "active" and state.main_pid is not None
    await systemd_bus.stop("sglang.service", timeout=T)


async def test_concurrent_jobs_each_get_their_own_result(
    systemd_bus: SystemdBus, fake_systemd: FakeSystemd
) -> None:
    """other.service's job fails at once while sglang.service's is still running: each call
    gets its own job's result, in whatever order the signals came."""
    await fake_systemd.control("SetJobDelay", "sd", "sglang.service", 0.3)
    await fake_systemd.control("ForceJobResult", "ss", "other.service", "dependency")
    slow, fast = await asyncio.gather(
        systemd_bus.start("sglang.service", timeout=T),
        systemd_bus.start("other.service", timeout=T),
        return_exceptions=True,
    )
    assert isinstance(slow, str) and slow.startswith("/org/freedesktop/systemd1/job/")
    assert isinstance(fast, JobFailed)
    assert (fast.unit, fast.operation, fast.job_result) == ("other.service", "start", "dependency")
    assert fast.job is not None and fast.job != slow
    await systemd_bus.stop("sglang.service", timeout=T)


async def test_failed_job_raises_with_its_result(
    systemd_bus: SystemdBus, fake_systemd: FakeSystemd
) -> None:
    await fake_systemd.control("ForceJobResult", "ss", "sglang.service", "failed")
    with pytest.raises(JobFailed) as raised:
        await systemd_bus.start("sglang.service", timeout=T)
    assert raised.value.job_result == "failed" and raised.value.operation == "start"
    state = await systemd_bus.unit_state("sglang.service", timeout=T)
    assert state.active_state == "failed"
    await systemd_bus.reset_failed("sglang.service", timeout=T)
    state = await systemd_bus.unit_state("sglang.service", timeout=T)
    assert (state.active_state, state.result) == ("inactive", "success")


async def test_a_replaced_job_is_canceled(
    systemd_bus: SystemdBus, fake_systemd: FakeSystemd
) -> None:
    """Mode ``replace``: a stop queued while the start job waits cancels the start."""
    await fake_systemd.control("SetJobDelay", "sd", "sglang.service", 0.5)
    starting = asyncio.create_task(systemd_bus.start("sglang.service", timeout=T))
    await asyncio.sleep(0.1)
    await systemd_bus.stop("sglang.service", timeout=T)
    with pytest.raises(JobFailed) as raised:
        await starting
    assert raised.value.job_result == "canceled"


async def test_job_past_its_timeout(systemd_bus: SystemdBus, fake_systemd: FakeSystemd) -> None:
    # The job takes 30 s: a JobTimeout with the job still queued is the timeout's doing.
    await fake_systemd.control("SetJobDelay", "sd", "sglang.service", 30.0)
    with pytest.raises(JobTimeout) as raised:
        await systemd_bus.start("sglang.service", timeout=0.3)
    assert raised.value.job is not None and raised.value.job.startswith("/org/freedesktop/")
    state = await systemd_bus.unit_state("sglang.service", timeout=T)
    assert state.job is not None  # still queued: a timeout does not cancel systemd's job


async def test_crash_and_missing_binary_show_exit_status(systemd_bus: SystemdBus) -> None:
    # Type=simple: the start job is done after the fork; the failure shows in the state.
    await systemd_bus.start("crash.service", timeout=T)
    crashed = await _state_until(systemd_bus, "crash.service", "failed")
    assert (crashed.result, crashed.exec_main_status, crashed.exec_main_code) == (
        "exit-code",
        3,
        1,
    )
    await systemd_bus.start("missing.service", timeout=T)
    missing = await _state_until(systemd_bus, "missing.service", "failed")
    assert missing.exec_main_status == 203


async def test_reload_loads_changed_unit_files(
    systemd_bus: SystemdBus, fake_systemd: FakeSystemd
) -> None:
    fake_systemd.units["sglang.service"]["argv"] = ["/bin/sleep", "120"]
    fake_systemd.rewrite_units()
    before = await systemd_bus.unit_state("sglang.service", timeout=T)
    assert before.need_daemon_reload is True
    assert await systemd_bus.exec_start("sglang.service", timeout=T) == ["/bin/sleep", "60"]

    await systemd_bus.reload(timeout=T)
    after = await systemd_bus.unit_state("sglang.service", timeout=T)
    assert after.need_daemon_reload is False
    assert await systemd_bus.exec_start("sglang.service", timeout=T) == ["/bin/sleep", "120"]
    assert await fake_systemd.control("Reloads") == [1]


async def test_unknown_unit(systemd_bus: SystemdBus) -> None:
    state = await systemd_bus.unit_state("nope.service", timeout=T)
    assert state.load_state == "not-found" and not state.exists
    with pytest.raises(BusCallFailed) as raised:
        await systemd_bus.start("nope.service", timeout=T)
    assert raised.value.error_name == "org.freedesktop.systemd1.NoSuchUnit"


async def test_bus_without_systemd_is_unavailable(private_bus: str) -> None:
    bus = SystemdBus(private_bus)
    with pytest.raises(BusUnavailable) as raised:
        await bus.connect(timeout=T)
    assert raised.value.reason == "org.freedesktop.systemd1 is not on the bus"
    with pytest.raises(BusUnavailable):
        await SystemdBus("unix:path=/nonexistent/orchestrator-test-bus").connect(timeout=T)


async def test_a_lost_bus_fails_the_job_wait_at_once(tmp_path: Path) -> None:
    """The bus daemon dies while a job is pending: the wait ends with BusUnavailable at once,
    not at the job's timeout."""
    daemon, address = _start_bus(tmp_path)
    units_file = tmp_path / "units.json"
    units_file.write_text(json.dumps(_units()))
    fake = _start_fake(address, units_file)
    bus = SystemdBus(address)
    try:
        await bus.connect(timeout=T)
        fake_handle = FakeSystemd(address, units_file, _units())
        await fake_handle.control("SetJobDelay", "sd", "sglang.service", 30.0)
        starting = asyncio.create_task(bus.start("sglang.service", timeout=30.0))
        await asyncio.sleep(0.2)
        begun = time.monotonic()
        _stop(daemon)
        with pytest.raises(BusUnavailable):
            await starting
        assert time.monotonic() - begun < 20  # long before the job's 30 s timeout
    finally:
        await bus.close()
        _stop(fake)
        _stop(daemon)


async def test_bus_unit_control_is_a_unit_control(systemd_bus: SystemdBus) -> None:
    control: UnitControl = BusUnitControl(systemd_bus, LocalTransport("test"))
    assert isinstance(control, UnitControl)
    await control.daemon_reload(timeout=T)
    await control.start("sglang.service", timeout=T)
    assert (await control.show("sglang.service", timeout=T)).running
    await control.stop("sglang.service", timeout=T)
    assert not (await control.show("sglang.service", timeout=T)).running
    await control.reset_failed("sglang.service", timeout=T)


# --- local mode: the host's unit control and GPU reader, chosen at first use ---------------


def test_system_bus_address_as_libdbus_finds_it() -> None:
    assert system_bus_address({}) == DEFAULT_SYSTEM_BUS_ADDRESS
    assert system_bus_address({"DBUS_SYSTEM_BUS_ADDRESS": ""}) == DEFAULT_SYSTEM_BUS_ADDRESS
    assert system_bus_address({"DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/x"}) == "unix:path=/x"


async def test_local_control_goes_over_the_bus_and_reads_the_files_it_lists(
    private_bus: str, tmp_path: Path
) -> None:
    """Units, state and files of a local host come from the manager on the bus: the files are
    read at the FragmentPath and DropInPaths it gives (what ``systemctl cat`` reads)."""
    fragment = tmp_path / "sglang.service"
    fragment.write_text("[Service]\nExecStart=/bin/sleep 60\n")
    dropin = tmp_path / "sglang.service.d" / "90-orchestrator.conf"
    dropin.parent.mkdir()
    dropin.write_text("[Service]\nExecStart=\nExecStart=/bin/sleep 61\n")
    units = {
        "sglang.service": {
            "argv": ["/bin/sleep", "61"],
            "fragment_path": str(fragment),
            "drop_in_paths": [str(dropin)],
        },
        "gone.service": {"argv": ["/bin/true"], "fragment_path": str(tmp_path / "gone")},
    }
    units_file = tmp_path / "units.json"
    units_file.write_text(json.dumps(units))
    fake = _start_fake(private_bus, units_file)
    transport = LocalTransport("local")
    control = LocalUnitControl(transport, bus_address=private_bus)
    handle = HostHandle(transport, control, LocalGpuProbe(transport))
    try:
        assert control.mechanism is None  # nothing chosen before the first use
        files = await control.cat("sglang.service", timeout=T)
        assert [(f.path, f.text) for f in files] == [
            (str(fragment), fragment.read_text()),
            (str(dropin), dropin.read_text()),
        ]
        assert merged_service(files).exec_start == ("/bin/sleep", "61")
        assert (control.mechanism, handle.access.unit_control) == ("dbus", "dbus")
        assert private_bus in control.detail
        await control.start("sglang.service", timeout=T)
        assert (await control.show("sglang.service", timeout=T)).running
        await control.stop("sglang.service", timeout=T)
        with pytest.raises(SystemdError, match="listed by the manager but absent"):
            await control.cat("gone.service", timeout=T)
    finally:
        await handle.close()
        _stop(fake)


STAND_IN_SYSTEMCTL = r"""#!/bin/sh
printf '%s\n' "$*" >> "$CALLS"
[ "$1" = show ] && printf 'LoadState=loaded\nActiveState=inactive\n'
exit 0
"""


async def test_local_control_without_systemd_on_a_bus_uses_systemctl_and_keeps_it(
    private_bus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No socket: systemctl, chosen at the first call and kept when a bus with systemd appears
    later; a bus without systemd on it: systemctl too, with that reason."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(STAND_IN_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("CALLS", str(calls))
    later = tmp_path / "later"
    later.mkdir()
    control = LocalUnitControl(LocalTransport("local"), bus_address=f"unix:path={later}/bus")
    assert (await control.show("sglang.service", timeout=T)).load_state == "loaded"
    assert control.mechanism == "systemctl" and "cannot connect" in control.detail
    daemon, address = _start_bus(later)
    units_file = tmp_path / "units.json"
    units_file.write_text(json.dumps(_units()))
    fake = _start_fake(address, units_file)
    try:
        await control.start("sglang.service", timeout=T)
        assert calls.read_text().splitlines()[-1] == "start sglang.service"
        assert control.mechanism == "systemctl"
    finally:
        await control.close()
        _stop(fake)
        _stop(daemon)

    bare = LocalUnitControl(LocalTransport("local"), bus_address=private_bus)
    await bare.daemon_reload(timeout=T)
    assert bare.mechanism == "systemctl"
    assert "org.freedesktop.systemd1 is not on the bus" in bare.detail
    assert calls.read_text().splitlines()[-1] == "daemon-reload"


async def test_local_gpus_without_nvml_are_read_with_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where NVML is missing (no driver here), the GPUs come from ``nvidia-smi`` on PATH."""
    missing = await asyncio.to_thread(nvml_missing)
    if missing is None:
        pytest.skip("this machine has NVML: a local host reads its GPUs through it")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        f"#!/bin/sh\nexec {sys.executable} -m orchestrator.sim.nvidia_smi"
        f' --state-dir {tmp_path / "gpu"} "$@"\n'
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    probe = LocalGpuProbe(LocalTransport("local"))
    try:
        snapshot = await probe.snapshot()
        assert [g.index for g in snapshot.gpus] == list(range(len(snapshot.gpus)))
        assert snapshot.gpus and probe.mechanism == "nvidia-smi"
        assert missing in probe.detail
    finally:
        probe.close()


# --- against the real manager, read-only ---------------------------------------------------


def _system_bus_present() -> bool:
    return SYSTEM_BUS_SOCKET.exists()


async def test_real_system_manager_read_only() -> None:
    if not _system_bus_present():
        pytest.skip(f"no system bus here ({SYSTEM_BUS_SOCKET} missing)")
    bus = SystemdBus()
    try:
        await bus.connect(timeout=T)
    except BusUnavailable as exc:
        pytest.skip(f"systemd does not answer on the system bus: {exc}")
    try:
        state = await bus.unit_state("dbus.service", timeout=T)
        assert state.load_state == "loaded", state
        assert state.active_state == "active"  # the bus we are talking over runs
        assert state.main_pid is not None and state.invocation_id is not None
        assert len(state.invocation_id) == 32
        argv = await bus.exec_start("dbus.service", timeout=T)
        assert argv and ("dbus-daemon" in argv[0] or "dbus-broker" in argv[0]), argv
        assert (await bus.unit_state("orchestrator-no-such-unit.service")).load_state == (
            "not-found"
        )
    finally:
        await bus.close()
