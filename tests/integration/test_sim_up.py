"""``sim up`` as a user runs it: one JSON line with absolute paths, hosts reachable with the
system ssh client, a sweep file that validates, faults applied per host, and nothing left
running after SIGINT."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
    deadline = time.monotonic() + 5
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
