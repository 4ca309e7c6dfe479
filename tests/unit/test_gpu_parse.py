"""nvidia-smi CSV parsing and the memory-release decision."""

from __future__ import annotations

import pytest

from orchestrator.host.gpu import (
    GpuQueryError,
    GpuSnapshot,
    MemoryNotReleased,
    baseline_from,
    parse_compute_apps,
    parse_gpu_identities,
    parse_gpu_memory,
    release_status,
)

U0 = "GPU-5a4f7c5e-0000-1111-2222-333344445555"
U1 = "GPU-5a4f7c5e-0000-1111-2222-333344446666"
MEMORY = f"0, {U0}, 81234, 81559\n1, {U1}, [N/A], 81559\n"
IDLE = f"0, {U0}, 4, 81559\n1, {U1}, 4, 81559\n"


def test_gpu_memory_with_na() -> None:
    gpus = parse_gpu_memory(MEMORY)
    assert [(g.index, g.uuid, g.used_mib, g.total_mib) for g in gpus] == [
        (0, U0, 81234, 81559),
        (1, U1, None, 81559),
    ]


def test_compute_apps_empty_and_permissions() -> None:
    assert parse_compute_apps("") == ()
    assert parse_compute_apps("\n") == ()
    apps = parse_compute_apps(f"{U0}, 4242, 70000\n{U1}, 4243, [Insufficient Permissions]\n")
    assert [(p.gpu_uuid, p.pid, p.used_mib) for p in apps] == [(U0, 4242, 70000), (U1, 4243, None)]
    assert parse_compute_apps("[N/A], 77, 10\n")[0].gpu_uuid is None


def test_malformed_rows_raise_with_the_line() -> None:
    with pytest.raises(GpuQueryError, match="81234"):
        parse_gpu_memory("0, 81234\n")


def test_identities() -> None:
    ids = parse_gpu_identities("NVIDIA H200, 570.86.15\nNVIDIA RTX PRO 6000, 575.51\n")
    assert [(i.name, i.driver_version) for i in ids] == [
        ("NVIDIA H200", "570.86.15"),
        ("NVIDIA RTX PRO 6000", "575.51"),
    ]


def _snapshot(memory: str, apps: str = "") -> GpuSnapshot:
    return GpuSnapshot(parse_gpu_memory(memory), parse_compute_apps(apps))


def test_release_logic() -> None:
    baseline = baseline_from(_snapshot(IDLE), None)
    assert dict(baseline.used_mib) == {0: 4, 1: 4}

    held = release_status(
        _snapshot(f"0, {U0}, 70004, 81559\n1, {U1}, 4, 81559\n", f"{U0}, 4242, 70000\n"),
        baseline,
        [0, 1],
        512,
    )
    assert not held.released
    assert [(x.pid, x.gpu, x.used_mib) for x in held.leftovers] == [(4242, 0, 70000)]
    assert held.excess_mib[0] == 70000

    # Processes gone but the driver has not handed memory back yet.
    lagging = release_status(
        _snapshot(f"0, {U0}, 9000, 81559\n1, {U1}, 4, 81559\n"), baseline, [0, 1], 512
    )
    assert not lagging.released and not lagging.leftovers

    within = release_status(
        _snapshot(f"0, {U0}, 300, 81559\n1, {U1}, 4, 81559\n"), baseline, [0, 1], 512
    )
    assert within.released

    # A process on a GPU that is not the unit's does not block; one on an unknown GPU does.
    other_gpu = release_status(_snapshot(IDLE, f"{U1}, 99, 100\n"), baseline, [0], 512)
    assert other_gpu.released
    unknown = release_status(_snapshot(IDLE, "[N/A], 99, 100\n"), baseline, [0], 512)
    assert not unknown.released and unknown.leftovers[0].gpu is None

    unreadable = release_status(_snapshot(MEMORY.replace("81234", "4")), baseline, None, 512)
    assert not unreadable.released


def test_baseline_errors() -> None:
    with pytest.raises(GpuQueryError, match=r"\[3\]"):
        baseline_from(_snapshot(IDLE), [0, 3])
    with pytest.raises(GpuQueryError, match="unreadable"):
        baseline_from(_snapshot(MEMORY), None)


def test_memory_not_released_message_carries_evidence() -> None:
    baseline = baseline_from(_snapshot(IDLE), None)
    status = release_status(_snapshot(IDLE, f"{U0}, 4242, 70000\n"), baseline, None, 512)
    error = MemoryNotReleased(status, 30.0)
    assert "pid 4242 on GPU 0 (70000 MiB)" in str(error)
    assert error.leftovers == status.leftovers and error.waited_s == 30.0


def test_idle_baseline_is_used_minus_what_the_processes_hold() -> None:
    from orchestrator.host.gpu import GpuMemory, GpuProcess, GpuSnapshot, idle_baseline

    gpus = (GpuMemory(0, "GPU-a", 81000, 97887), GpuMemory(1, "GPU-b", 80500, 97887))
    held = (GpuProcess("GPU-a", 10, 80000), GpuProcess("GPU-b", 11, 80000))
    baseline = idle_baseline(GpuSnapshot(gpus, held), None)
    assert baseline is not None and dict(baseline.used_mib) == {0: 1000, 1: 500}
    # Only the unit's GPUs count; a process whose memory is unreadable gives no baseline.
    only_one = idle_baseline(GpuSnapshot(gpus, held), [1])
    assert only_one is not None and dict(only_one.used_mib) == {1: 500}
    unreadable = (GpuProcess("GPU-a", 10, None),)
    assert idle_baseline(GpuSnapshot(gpus, unreadable), None) is None
