"""``sim up`` as a user runs it: one JSON line with absolute paths, hosts reachable with the
system ssh client, a sweep file that validates, faults applied per host, and nothing left
running after SIGINT."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.sim.host import UNIT_NAME, render_unit, sglang_argv
from orchestrator.sim.procscan import Listener
from orchestrator.sim.sshd import BindError
from tests.integration.daemon_proc import stop_process
from tests.integration.test_sim_support import (
    ensure_openssh_client,
    pid_alive,
    processes_mentioning,
)


def _ssh(host: dict[str, object], command: str) -> subprocess.CompletedProcess[str]:
    argv = [
        "ssh",
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={host['known_hosts']}",
        "-i",
        str(host["identity_file"]),
        "-p",
        str(host["port"]),
        f"{host['user']}@{host['address']}",
        command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)


def test_sim_up_json_then_clean_shutdown(tmp_path: Path) -> None:
    ensure_openssh_client()
    faults = tmp_path / "faults.yaml"
    faults.write_text(
        '"*":\n  memory_release_lag_s: 0.2\n  server: {load_s: 0.5, warmup_s: 0.1}\n'
        "sim-02:\n  unit_running: false\n"
    )
    state = tmp_path / "state"
    port = 3200 + os.getpid() % 300
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.sim.cli",
            "up",
            "--hosts",
            "2",
            "--json",
            "--state-dir",
            str(state),
            "--time-scale",
            "0.2",
            "--base-address",
            "127.0.0.91",
            "--port",
            str(port),
            "--faults",
            str(faults),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, process.stderr.read() if process.stderr else ""
        document = json.loads(line)
        hosts = document["hosts"]
        assert [h["name"] for h in hosts] == ["sim-01", "sim-02"]
        assert [h["address"] for h in hosts] == ["127.0.0.91", "127.0.0.92"]
        for host in hosts:
            assert set(host) == {
                "name",
                "address",
                "port",
                "user",
                "identity_file",
                "known_hosts",
                "base_url",
            }
            assert Path(host["identity_file"]).is_absolute()
            assert Path(host["known_hosts"]).is_absolute()
            assert host["base_url"] == f"http://{host['address']}:30000"
        key_mode = stat.S_IMODE(os.stat(hosts[0]["identity_file"]).st_mode)
        assert key_mode == 0o600
        known = Path(hosts[0]["known_hosts"]).read_text().splitlines()
        assert [k.split()[0] for k in known] == [f"[127.0.0.91]:{port}", f"[127.0.0.92]:{port}"]
        assert all(k.split()[1] == "ssh-ed25519" for k in known)
        sweep = Path(document["sweep_file"])
        assert sweep.is_absolute() and sweep.exists()
        try:
            from orchestrator.sweepfile import load_sweep
        except ImportError:  # pragma: no cover - the sweep module lands separately
            pytest.skip("orchestrator.sweepfile not available")
        loaded = load_sweep(sweep)
        assert [h.name for h in loaded.hosts] == ["sim-01", "sim-02"]

        first = _ssh(hosts[0], "systemctl show -p ActiveState,MainPID sglang.service")
        assert first.returncode == 0, first.stderr
        values = dict(x.split("=", 1) for x in first.stdout.splitlines())
        assert values["ActiveState"] == "active"
        main_pid = int(values["MainPID"])
        second = _ssh(hosts[1], "systemctl is-active sglang.service")
        assert (second.returncode, second.stdout) == (3, "inactive\n")  # faults file applied
        assert processes_mentioning(str(state))
    finally:
        process.send_signal(signal.SIGINT)
        try:
            status = process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert status == 0
    assert not pid_alive(main_pid)
    deadline = time.monotonic() + 30  # for a process that never goes: the poll ends sooner
    while processes_mentioning(str(state)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(state)) == []


def test_sim_up_rejects_a_bad_faults_file(tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text("sim-09:\n  frozen: {after_s: 1}\nsim-01:\n  jounral_drop_rate: 0.5\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.sim.cli",
            "up",
            "--hosts",
            "1",
            "--state-dir",
            str(tmp_path / "s"),
            "--faults",
            str(faults),
            "--base-address",
            "127.0.0.95",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "sim-09: no such host" in result.stderr
    assert "jounral_drop_rate" in result.stderr


HOLD_PORT = r"""
import socket, sys, time
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind((sys.argv[1], int(sys.argv[2])))
sock.listen()
print("listening", flush=True)
time.sleep(120)
"""


def _sim_up(state: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.sim.cli", "up", "--json", "--state-dir", str(state),
         *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def test_sim_up_names_a_taken_address_and_what_holds_it(tmp_path: Path) -> None:
    """The second host's SSH port is held by another process: one plain line naming the address
    and the holder's pid, exit 1, no traceback, and the first host's server is not left
    running (the hosts that did start are stopped again)."""
    port = 3500 + os.getpid() % 300
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_PORT, "127.0.0.97", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    state = tmp_path / "state"
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "listening\n"
        result = subprocess.run(
            [sys.executable, "-m", "orchestrator.sim.cli", "up", "--hosts", "2", "--state-dir",
             str(state), "--base-address", "127.0.0.96", "--port", str(port)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait(timeout=5)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    line = _last_line(result.stderr)
    assert line.startswith(f"sim up: 127.0.0.97:{port} is in use by pid {holder.pid} ("), line
    assert "HOLD_PORT" not in line and "\n" not in line
    assert processes_mentioning(str(state)) == []


def test_sim_up_rewrites_a_stale_unit_and_a_sweep_runs_on_it(tmp_path: Path) -> None:
    """A host directory from an earlier checkout keeps a unit naming an interpreter that is
    gone; the host comes up with this checkout's unit and a small sweep runs to the end."""
    state = tmp_path / "state"
    unit_path = state / "hosts" / "sim-01" / "root" / "etc/systemd/system" / UNIT_NAME
    unit_path.parent.mkdir(parents=True)
    gone = str(tmp_path / "old-checkout" / ".venv" / "bin" / "python")
    stale = render_unit(
        [gone, *sglang_argv("127.0.0.98")[1:]], description="SGLang server (sim-01, simulated)"
    )
    unit_path.write_text(stale, encoding="utf-8")
    port = 3800 + os.getpid() % 200
    process = _sim_up(
        state, "--hosts", "1", "--time-scale", "0.05", "--base-address", "127.0.0.98",
        "--port", str(port),
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, process.stderr.read() if process.stderr else ""
        document = json.loads(line)
        fresh = render_unit(
            sglang_argv("127.0.0.98"), description="SGLang server (sim-01, simulated)"
        )
        assert unit_path.read_text(encoding="utf-8") == fresh
        sweep = yaml.safe_load(Path(document["sweep_file"]).read_text())
        sweep["configs"] = sweep["configs"][:1]
        sweep["benchmark"].update(contexts=[60], concurrency=[1])
        sweep["coding"]["select"] = ["fib"]
        small = tmp_path / "small.yaml"
        small.write_text(yaml.safe_dump(sweep, sort_keys=False))
        run = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "run", str(small), "--db",
             str(tmp_path / "run.db"), "--json"],
            capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
    finally:
        stop_process(process)
    assert run.returncode == 0, run.stderr[-3000:]
    trials = json.loads(run.stdout)["trials"]
    assert len(trials) == 2 and {t["state"] for t in trials} == {"done"}, trials


def test_demo_while_sim_up_holds_the_addresses_is_one_plain_line(tmp_path: Path) -> None:
    """FIXED ADDRESSES (the demo's 127.0.0.11:2222): run under the shared lock. ``demo`` meets
    a ``sim up`` on its addresses: one line naming the address and the ``sim up`` process,
    exit 1, no traceback, nothing of the demo left running."""
    sim = _sim_up(tmp_path / "sim", "--hosts", "1", "--time-scale", "0.05")
    try:
        assert sim.stdout is not None
        line = sim.stdout.readline()
        assert line, sim.stderr.read() if sim.stderr else ""
        assert json.loads(line)["hosts"][0]["address"] == "127.0.0.11"
        demo_state = tmp_path / "demo"
        result = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "demo", "--state-dir", str(demo_state)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        leftover = processes_mentioning(str(demo_state))
    finally:
        stop_process(sim)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    last = _last_line(result.stderr)
    assert last.startswith(f"demo: 127.0.0.11:2222 is in use by pid {sim.pid} ("), last
    assert "orchestrator.sim.cli up" in last
    assert leftover == []


def test_bind_error_lines_without_a_visible_holder() -> None:
    """When /proc shows no holder (another namespace, no permission) the line says what to
    check; an address that cannot be assigned says so, not "in use"."""
    hidden = BindError("127.0.0.11", 2222, errno.EADDRINUSE, os.strerror(errno.EADDRINUSE), [])
    assert str(hidden) == (
        "127.0.0.11:2222 is in use (is `orchestrator sim up` or `orchestrator demo` running?)"
    )
    unassignable = BindError("10.9.9.9", 22, errno.EADDRNOTAVAIL, "Cannot assign", [])
    assert str(unassignable) == "cannot listen on 10.9.9.9:22: Cannot assign"
    long_command = Listener(7, "python\n-c " + "x" * 300)
    held = BindError("127.0.0.11", 2222, errno.EADDRINUSE, "in use", [long_command])
    assert str(held) == f"127.0.0.11:2222 is in use by pid 7 (python -c {'x' * 87}...)"
