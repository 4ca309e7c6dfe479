"""The restart protocol against a REAL systemd + journald + sshd host, with the simulated SGLang
server as the unit's program and a stand-in nvidia-smi fed by its GPU registrations."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator import engines
from orchestrator.host.gpu import NvidiaSmiProbe
from orchestrator.host.handle import HostHandle
from orchestrator.host.ssh import SSHSettings, SSHTransport
from orchestrator.host.unitcontrol import SystemctlControl
from orchestrator.lifecycle import (
    HostSession,
    LifecycleTimeouts,
    TrialDropin,
    TrialFailed,
    reconfigure,
    restore,
    trial_config,
)
from orchestrator.preflight import check_host, mapped_flags
from tests.realhost.realhost import RealHost

UNIT = "sglang.service"
SGLANG = engines.get("sglang")
PORT = 30000


def _base_argv(host: RealHost) -> list[str]:
    return [
        sys.executable, "-m", "orchestrator.sim.sglang_server",
        "--model-path", "/models/Kimi-K2.6", "--served-model-name", "kimi-k2.6",
        "--tp-size", "8", "--host", host.address, "--port", str(PORT),
        "--reasoning-parser", "kimi_k2", "--enable-metrics", "--decode-log-interval", "4",
        "--speculative-algorithm", "DFLASH",
        "--speculative-draft-model-path", "/models/Kimi-K2.6-DFlash",
    ]  # fmt: skip


def _install_host(host: RealHost, sim: dict[str, Any]) -> Path:
    """Write the host's SGLang unit and stand-in nvidia-smi; returns the GPU state dir."""
    gpu_dir = host.root / "gpu"
    gpu_dir.mkdir(exist_ok=True)
    config = host.root / "sim.json"
    config.write_text(json.dumps({"gpu_state_dir": str(gpu_dir), **sim}))
    smi = host.bin_dir / "nvidia-smi"
    smi.write_text(
        f"#!/bin/sh\nexec {sys.executable} -m orchestrator.sim.nvidia_smi"
        f' --state-dir {gpu_dir} "$@"\n'
    )
    smi.chmod(0o755)
    exec_start = " ".join(_base_argv(host))
    (host.unit_dir / UNIT).write_text(
        "[Unit]\nDescription=SGLang (simulated)\n\n[Service]\nType=simple\n"
        f"Environment=ORCH_SIM_CONFIG={config}\nExecStart={exec_start}\n"
        "KillMode=control-group\nTimeoutStopSec=20\n"
    )
    host.ssh(["systemctl", "daemon-reload"])
    return gpu_dir


@pytest.fixture
async def session(real_host: RealHost) -> AsyncIterator[HostSession]:
    _install_host(
        real_host,
        {"time_scale": 0.05, "load_s": 10.0, "warmup_s": 2.0, "stop_delay_s": 4.0},
    )
    real_host.ssh(["systemctl", "start", UNIT])
    transport = SSHTransport(
        SSHSettings(
            name=real_host.name,
            address=real_host.address,
            port=real_host.port,
            identity_file=str(real_host.identity_file),
            known_hosts=str(real_host.known_hosts),
        )
    )
    events: list[tuple[str, dict[str, Any]]] = []

    async def record(kind: str, /, **fields: Any) -> None:
        events.append((kind, fields))

    host = HostSession(
        host=HostHandle(transport, SystemctlControl(transport), NvidiaSmiProbe(transport)),
        unit=UNIT,
        base_url=f"http://{real_host.address}:{PORT}",
        api="chat",
        model="kimi-k2.6",
        timeouts=LifecycleTimeouts(stop=30, memory_release=20, ready=30, command=15),
        events=record,
        engine=SGLANG,
    )
    host.recorded = events  # type: ignore[attr-defined]
    try:
        yield host
    finally:
        await transport.close()


@dataclass(frozen=True)
class Knob:
    flag: str | None = None
    env: str | None = None
    json_key: str | None = None
    server_info_key: str | None = None
    overridden_by_server: bool = False


KNOBS = {
    "algorithm": Knob(flag="--speculative-algorithm"),
    "block": Knob(flag="--speculative-num-draft-tokens"),
    "window": Knob(flag="--speculative-draft-window-size"),
    "legacy_window": Knob(flag="--speculative-dflash-draft-window-size"),
    "topk": Knob(env="SGLANG_DDTREE_MAX_TOPK"),
}


def _await_serving(base_url: str, timeout: float = 20.0) -> None:
    """Poll ``/health`` until the unit's server answers (raises after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=1.0) as reply:
                if reply.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


async def _trial(session: HostSession, key: str, config: dict[str, Any]) -> TrialDropin:
    found = await session.read_found()
    return trial_config(
        found, sweep="realhost", key=key, knobs=KNOBS, config=config, engine=session.engine
    )


async def test_clean_trial_then_restore_byte_identical(
    real_host: RealHost, session: HostSession
) -> None:
    before = {p.name: p.read_bytes() for p in real_host.unit_dir.rglob("*") if p.is_file()}
    found_running = await session.read_found()
    assert found_running.state.running

    trial = await _trial(session, "t1", {"algorithm": "DFLASH", "block": 16, "window": 2048})
    server = await reconfigure(session, trial)
    assert len(server.invocation_id) == 32
    assert server.invocation_id != found_running.state.invocation_id
    assert server.server_info["speculative_draft_window_size"] == 2048
    kinds = [kind for kind, _ in session.recorded]  # type: ignore[attr-defined]
    steps = ("dropin.installed", "unit.stopped", "memory.released", "unit.started", "server.ready")
    assert all(step in kinds for step in steps), kinds
    firsts = [kinds.index(step) for step in steps]
    assert firsts == sorted(firsts), kinds  # the protocol's steps, in its order

    await restore(session, "as-found")
    after = {p.name: p.read_bytes() for p in real_host.unit_dir.rglob("*") if p.is_file()}
    assert after == before
    assert not (real_host.unit_dir / f"{UNIT}.d").exists()
    show = real_host.ssh(["systemctl", "show", "-p", "ActiveState", UNIT]).stdout.decode()
    assert "ActiveState=active" in show


async def test_invalid_config_fails_fast_with_cause(
    real_host: RealHost, session: HostSession
) -> None:
    trial = await _trial(session, "bad", {"algorithm": "DFLASH", "block": 16, "window": 8})
    with pytest.raises(TrialFailed) as failed:
        await reconfigure(session, trial)
    assert failed.value.cause == "invalid-config"
    assert any("ValueError" in line for line in failed.value.excerpt)
    assert failed.value.exit_status == 1
    await restore(session, "stopped")


async def test_bad_flag_is_bad_flag(real_host: RealHost, session: HostSession) -> None:
    # The simulated 0.5.23 build no longer knows the old window spelling: argparse exits 2.
    trial = await _trial(session, "flag", {"algorithm": "DFLASH", "legacy_window": 2048})
    with pytest.raises(TrialFailed) as failed:
        await reconfigure(session, trial)
    # at the exit, not at the ready timeout (whose only cause is ready-timeout)
    assert failed.value.cause == "bad-flag"
    assert failed.value.exit_status == 2
    assert any("unrecognized arguments" in line for line in failed.value.excerpt)
    await restore(session, "as-found")


async def test_leftover_process_holds_memory_so_the_unit_is_not_started(
    real_host: RealHost, session: HostSession
) -> None:
    # KillMode=process: a scheduler child outlives the stop and keeps its GPU memory (FACTS.md).
    config = real_host.root / "sim.json"
    settings = json.loads(config.read_text())
    settings["faults"] = {"leftover_child_s": -1}
    config.write_text(json.dumps(settings))
    unit = real_host.unit_dir / UNIT
    unit.write_text(unit.read_text().replace("KillMode=control-group", "KillMode=process"))
    real_host.ssh(["systemctl", "daemon-reload"])
    real_host.ssh(["systemctl", "restart", UNIT])
    # Type=simple: the restart returns before the server has forked its scheduler child, and a
    # stop that early would find no child to leave behind. The child exists once it serves.
    _await_serving(session.base_url)
    session.timeouts = dataclasses.replace(session.timeouts, memory_release=3.0)

    trial = await _trial(session, "held", {"algorithm": "DFLASH", "window": 2048})
    with pytest.raises(TrialFailed) as failed:
        await reconfigure(session, trial)
    assert failed.value.cause == "memory-not-released"
    leftovers = failed.value.evidence["leftovers"]
    assert leftovers and all(item["used_mib"] for item in leftovers)
    assert any(Path(f"/proc/{item['pid']}").exists() for item in leftovers)
    kinds = [kind for kind, _ in session.recorded]  # type: ignore[attr-defined]
    assert "unit.starting" not in kinds  # never started over held memory
    show = real_host.ssh(["systemctl", "show", "-p", "ActiveState", UNIT]).stdout.decode()
    assert "ActiveState=inactive" in show or "ActiveState=failed" in show


async def test_a_later_dropin_overriding_ours_is_detected_and_left_alone(
    real_host: RealHost, session: HostSession
) -> None:
    admin_dir = real_host.unit_dir / f"{UNIT}.d"
    admin_dir.mkdir()
    admin = admin_dir / "99-admin.conf"
    admin.write_bytes(b"[Service]\nExecStart=\nExecStart=/bin/sleep 1000\n")
    real_host.ssh(["systemctl", "daemon-reload"])
    before = {p.name: p.read_bytes() for p in real_host.unit_dir.rglob("*") if p.is_file()}

    trial = await _trial(session, "over", {"algorithm": "DFLASH", "window": 2048})
    with pytest.raises(TrialFailed) as failed:
        await reconfigure(session, trial)
    assert failed.value.cause == "config-mismatch"
    assert any("99-admin.conf" in problem for problem in failed.value.evidence["problems"])

    # The unit as found runs the operator's override (no HTTP server): restore brings it back
    # running, reports that it does not serve, and leaves the operator's drop-in as it was.
    session.timeouts = dataclasses.replace(session.timeouts, ready=3.0)
    await restore(session, "as-found")
    after = {p.name: p.read_bytes() for p in real_host.unit_dir.rglob("*") if p.is_file()}
    assert after == before  # the operator's drop-in untouched, ours gone
    kinds = [kind for kind, _ in session.recorded]  # type: ignore[attr-defined]
    assert "restore.not_serving" in kinds and "restore.done" in kinds


async def test_preflight_asks_the_hosts_python_and_falls_back_to_help(
    real_host: RealHost, session: HostSession
) -> None:
    """The preflight's ``env ... PYTHON -c SCRIPT ARGV`` runs for real over real sshd with the
    unit's interpreter: this host has no ``sglang`` package, so the import fails, the check
    says so, and flags are checked against ``--help`` (the old spelling is unknown to 0.5.23)."""
    checked = await check_host(
        session.host,
        unit=UNIT,
        flags=mapped_flags(KNOBS, []),
        gpus=None,
        command_timeout=15,
        trials=[("new", {"algorithm": "DFLASH", "window": 2048}),
                ("old", {"algorithm": "DFLASH", "legacy_window": 2048})],
        knobs=KNOBS,
        engine=session.engine,
    )  # fmt: skip
    assert checked.ok and checked.parser == "help", checked.to_json()
    parser = next(c for c in checked.checks if c.name == "sglang_parser")
    assert "sglang.srt.server_args import prepare_server_args failed" in parser.detail
    assert "No module named 'sglang'" in parser.detail and "--help" in parser.detail
    assert checked.unknown_flags == {"--speculative-dflash-draft-window-size"}
    assert checked.rejected == {}
