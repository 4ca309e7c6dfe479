"""The memory gate on a host with no NVIDIA GPU: its RAM, read from /proc/meminfo by a real
subprocess (llama.cpp's ``llama-server`` runs on the CPU; see orchestrator/host/gpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.host import gpu
from orchestrator.host.local import LocalTransport


def _path_with(tmp_path: Path, scripts: dict[str, str]) -> str:
    """A PATH of ``cat`` and the given scripts only (no nvidia-smi unless given)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cat").symlink_to("/bin/cat")
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return str(bin_dir)


async def test_host_memory_is_read_and_judged(tmp_path: Path) -> None:
    probe = gpu.HostMemoryProbe(LocalTransport("ram"), timeout=10)
    snapshot = await probe.snapshot()
    (ram,) = snapshot.gpus
    assert snapshot.host_memory and snapshot.processes == ()
    assert ram.uuid == gpu.HOST_MEMORY and ram.total_mib is not None and ram.used_mib is not None
    assert 0 < ram.used_mib < ram.total_mib
    assert await probe.identities() == ()
    # No process list: no baseline while the server runs; one read once it is stopped.
    assert gpu.idle_baseline(snapshot, None) is None
    baseline = await gpu.record_baseline(probe, None)
    assert baseline.method == "host-memory"
    assert gpu.release_status(snapshot, baseline, None, margin_mib=1 << 20).released
    held = gpu.GpuSnapshot((gpu.GpuMemory(0, gpu.HOST_MEMORY, ram.used_mib + 4096, None),), ())
    status = gpu.release_status(held, baseline, None, margin_mib=512)
    assert not status.released and status.excess_mib[0] >= 4096 - 512
    assert status.method == "host-memory"


async def test_no_nvidia_smi_means_host_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", _path_with(tmp_path, {}))
    probe = gpu.NvidiaSmiOrHostMemory(LocalTransport("cpu-host"), timeout=10)
    assert probe.mechanism is None
    snapshot = await probe.snapshot()
    assert snapshot.host_memory and probe.mechanism == "host-memory"
    assert "no nvidia-smi" in probe.detail
    assert (await probe.snapshot()).host_memory  # chosen once


async def test_a_failing_nvidia_smi_stays_a_gpu_query_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a missing nvidia-smi means no GPU: one that fails is a GPU host with a problem."""
    broken = "echo 'NVIDIA-SMI has failed because it couldn'\\''t communicate' >&2\nexit 9\n"
    monkeypatch.setenv("PATH", _path_with(tmp_path, {"nvidia-smi": broken}))
    probe = gpu.NvidiaSmiOrHostMemory(LocalTransport("gpu-host"), timeout=10)
    with pytest.raises(gpu.GpuQueryError, match="couldn't communicate") as caught:
        await probe.snapshot()
    assert caught.value.exit_status == 9 and probe.mechanism == "nvidia-smi"


async def test_a_working_nvidia_smi_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = (
        'case "$1" in --query-gpu=index*) echo "0, GPU-aaaa, 4, 81559";;\n'
        "--query-gpu=name*) echo 'NVIDIA H200, 580.1';; esac\n"
    )
    monkeypatch.setenv("PATH", _path_with(tmp_path, {"nvidia-smi": smi}))
    probe = gpu.NvidiaSmiOrHostMemory(LocalTransport("gpu-host"), timeout=10)
    snapshot = await probe.snapshot()
    assert not snapshot.host_memory and snapshot.gpus[0].used_mib == 4
    assert probe.mechanism == "nvidia-smi"
    assert (await probe.identities())[0].name == "NVIDIA H200"
