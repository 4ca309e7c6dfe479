"""The restart protocol against a REAL systemd + journald + sshd host, with the simulated SGLang
server as the unit's program and a stand-in nvidia-smi fed by its GPU registrations."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.host.gpu import NvidiaSmiProbe
from orchestrator.host.ssh import SSHSettings, SSHTransport
from orchestrator.lifecycle import (
    HostSession,
    LifecycleTimeouts,
    TrialConfig,
    TrialFailed,
    reconfigure,
    restore,
    trial_config,
)
from tests.realhost.realhost import RealHost

UNIT = "sglang.service"
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
        name=real_host.name,
        transport=transport,
        unit=UNIT,
        base_url=f"http://{real_host.address}:{PORT}",
        api="chat",
        model="kimi-k2.6",
        gpu_probe=NvidiaSmiProbe(transport),
        timeouts=LifecycleTimeouts(stop=30, memory_release=20, ready=30, command=15),
        events=record,
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
    server_info_key: str | None = None
    overridden_by_server: bool = False


KNOBS = {
    "algorithm": Knob(flag="--speculative-algorithm"),
    "block": Knob(flag="--speculative-num-draft-tokens"),
    "window": Knob(flag="--speculative-draft-window-size"),
    "legacy_window": Knob(flag="--speculative-dflash-draft-window-size"),
    "topk": Knob(env="SGLANG_DDTREE_MAX_TOPK"),
}


async def _trial(session: HostSession, key: str, config: dict[str, Any]) -> TrialConfig:
    found = await session.read_found()
    return trial_config(found, sweep="realhost", key=key, knobs=KNOBS, config=config)


async def test_clean_trial_then_restore_byte_identical(
    real_host: RealHost, session: HostSession
) -> None:
    before = {p.name: p.read_bytes() for p in real_host.unit_dir.rglob("*") if p.is_file()}
    found_running = await session.read_found()
    assert found_running.state.running

    trial = await _trial(session, "t1", {"algorithm": "DFLASH", "block": 16, "window": 2048})
    started = time.monotonic()
    server = await reconfigure(session, trial)
    assert len(server.invocation_id) == 32
    assert server.invocation_id != found_running.state.invocation_id
    assert server.server_info["speculative_draft_window_size"] == 2048
    kinds = [kind for kind, _ in session.recorded]  # type: ignore[attr-defined]
    steps = ("dropin.installed", "unit.stopped", "memory.released", "unit.started", "server.ready")
    assert all(step in kinds for step in steps), kinds
    assert time.monotonic() - started < 30

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
    started = time.monotonic()
    with pytest.raises(TrialFailed) as failed:
        await reconfigure(session, trial)
    assert failed.value.cause == "bad-flag"
    assert failed.value.exit_status == 2
    assert any("unrecognized arguments" in line for line in failed.value.excerpt)
    assert time.monotonic() - started < 20
    await restore(session, "as-found")
