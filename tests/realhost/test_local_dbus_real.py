"""``address: local`` for real: an orchestrator inside a REAL systemd host's namespaces (its SSH
session) sweeps that host's unit over the host's REAL system bus (Debian's dbus-daemon, with
the host's systemd manager registered on it), and reads its GPUs with ``nvidia-smi`` on PATH
(this machine has no NVML)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.realhost.realhost import SYSTEM_BUS_ADDRESS, RealHost
from tests.realhost.test_lifecycle_real import PORT, UNIT, _install_host

REPO = Path(__file__).resolve().parents[2]
# First on the host's PATH: records every systemctl the orchestrator runs (the variable is set
# for the orchestrator's process only), then runs the real one.
SYSTEMCTL_WITNESS = """#!/bin/sh
[ -n "${SYSTEMCTL_CALLS:-}" ] && printf '%s\\n' "$*" >> "$SYSTEMCTL_CALLS"
exec /bin/systemctl "$@"
"""


def _sweep_file(host: RealHost, path: Path) -> Path:
    path.write_text(
        textwrap.dedent(
            f"""\
            name: realhost-local-dbus
            hosts:
              - name: {host.name}
                address: local
                base_url: http://{host.address}:{PORT}
            server:
              knobs:
                block: {{flag: --speculative-num-draft-tokens}}
              unit: {UNIT}
              model: kimi-k2.6
            configs:
              - {{block: 8}}
            benchmark:
              contexts: [60]
              concurrency: [1]
              max_tokens: 16
              rounds: 1
              warmup_requests: 0
            timeouts: {{connect: 15, stop: 30, memory_release: 20, ready: 40, request: 60}}
            policy: {{trial_retries: 0, restore: as-found}}
            """
        )
    )
    return path


def test_local_sweep_runs_over_the_real_bus(real_bus_host: RealHost, tmp_path: Path) -> None:
    host = real_bus_host
    _install_host(
        host,
        {"time_scale": 0.05, "load_s": 1.0, "warmup_s": 0.5, "stop_delay_s": 0.5,
         "coding_wrong_rate": 0.0},
    )  # fmt: skip
    witness = host.bin_dir / "systemctl"
    witness.write_text(SYSTEMCTL_WITNESS)
    witness.chmod(0o755)
    host.ssh(["systemctl", "start", UNIT])
    before = {p: p.read_bytes() for p in host.unit_dir.rglob("*") if p.is_file()}
    sweep = _sweep_file(host, tmp_path / "sweep.yaml")
    db, log, calls = tmp_path / "o.db", tmp_path / "log.jsonl", tmp_path / "systemctl-calls"
    command = [
        "env", f"SYSTEMCTL_CALLS={calls}", sys.executable, "-m", "orchestrator.cli",
        "--log-file", str(log), "run", str(sweep), "--db", str(db), "--json",
    ]  # fmt: skip
    result = subprocess.run(
        host.ssh_argv(["sh", "-c", 'cd "$0" && exec "$@"', str(REPO), *command]),
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]

    (trial,) = json.loads(result.stdout)["trials"]
    assert trial["state"] == "done", trial
    kinds = [(p["kind"], p["concurrency"]) for p in trial["points"]]
    assert kinds == [("throughput", 1)], trial["points"]
    assert trial["points"][0]["metrics"]["output_tok_s"] > 0

    with sqlite3.connect(db) as connection:
        (fields,) = connection.execute(
            "SELECT fields FROM events WHERE kind = 'preflight'"
        ).fetchone()
    preflight = json.loads(fields)
    assert (preflight["unit_control"], preflight["gpu_reader"]) == ("dbus", "nvidia-smi")
    access = next(c for c in preflight["checks"] if c["name"] == "access")
    assert SYSTEM_BUS_ADDRESS in access["detail"], access
    chosen = [json.loads(line) for line in log.read_text().splitlines() if "chosen" in line]
    assert {(e["event"], e["mechanism"]) for e in chosen} == {
        ("unit_control.chosen", "dbus"),
        ("gpu_reader.chosen", "nvidia-smi"),
    }, chosen
    # Every read and every job of the unit went over the bus: no systemctl at all.
    assert not calls.exists(), calls.read_text()

    after = {p: p.read_bytes() for p in host.unit_dir.rglob("*") if p.is_file()}
    assert after == before
    show = host.ssh(["systemctl", "show", "-p", "ActiveState", UNIT]).stdout.decode()
    assert "ActiveState=active" in show
