"""GPUs that report no memory (GB10 / DGX Spark) and the text lines some drivers print in CSV
mode: release is judged by the compute-process list, and no text line is a failed query."""

from __future__ import annotations

import pytest

from orchestrator.host.gpu import (
    GpuIdentity,
    GpuQueryError,
    GpuSnapshot,
    MemoryNotReleased,
    baseline_from,
    idle_baseline,
    parse_compute_apps,
    parse_gpu_memory,
    release_status,
    wait_released,
)
from orchestrator.sim import nvidia_smi
from orchestrator.sim.gpu import GpuHostSpec, Registration, account

U0 = "GPU-0b10aaaa-0000-1111-2222-333344445555"
UNIFIED = f"0, {U0}, [N/A], [N/A]\n"
SMI_MEMORY = ["--query-gpu=index,uuid,memory.used,memory.total", "--format=csv,noheader,nounits"]
SMI_APPS = ["--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"]


@pytest.mark.parametrize(
    "text",
    [
        "No running processes found\n",
        "No running compute processes found\n",
        "[Not Supported]\n",
        "[N/A]\n",
        "\n[Not Supported]\n\n",
    ],
)
def test_text_lines_mean_no_process(text: str) -> None:
    assert parse_compute_apps(text) == ()


def test_na_cells_in_a_process_row_are_unknown_not_fatal() -> None:
    (process,) = parse_compute_apps(f"{U0}, 4242, [N/A]\n")
    assert (process.gpu_uuid, process.pid, process.used_mib) == (U0, 4242, None)
    (unknown_gpu,) = parse_compute_apps("[Not Supported], 77, [Not Supported]\n")
    assert (unknown_gpu.gpu_uuid, unknown_gpu.pid) == (None, 77)


def test_a_gpu_without_memory_is_judged_by_processes() -> None:
    (gpu,) = parse_gpu_memory(UNIFIED)
    assert (gpu.used_mib, gpu.total_mib, gpu.reports_memory) == (None, None, False)
    idle = GpuSnapshot(parse_gpu_memory(UNIFIED), ())
    baseline = baseline_from(idle, None)
    assert baseline.method == "compute-processes" and baseline.unreported == {0}
    assert idle_baseline(idle, None) == baseline  # before the stop as well
    held = GpuSnapshot(parse_gpu_memory(UNIFIED), parse_compute_apps(f"{U0}, 4242, 90000\n"))
    assert idle_baseline(held, None) == baseline
    busy = release_status(held, baseline, None, 512)
    assert not busy.released and [p.pid for p in busy.leftovers] == [4242]
    assert busy.method == "compute-processes"
    assert release_status(idle, baseline, None, 512).released


def test_used_unreadable_with_total_readable_is_still_a_failed_query() -> None:
    with pytest.raises(GpuQueryError, match="unreadable"):
        baseline_from(GpuSnapshot(parse_gpu_memory(f"0, {U0}, [N/A], 81559\n"), ()), None)


class _Probe:
    """nvidia-smi's answers, in turn: what a GB10 host prints."""

    def __init__(self, answers: list[tuple[str, str]]) -> None:
        self.answers = answers

    async def snapshot(self) -> GpuSnapshot:
        memory, apps = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return GpuSnapshot(parse_gpu_memory(memory), parse_compute_apps(apps))

    async def identities(self) -> tuple[GpuIdentity, ...]:
        return ()

    def close(self) -> None:
        """Nothing held."""


async def test_wait_ends_when_the_last_process_leaves() -> None:
    probe = _Probe(
        [(UNIFIED, f"{U0}, 4242, 90000\n"), (UNIFIED, f"{U0}, 4242, 90000\n"),
         (UNIFIED, "No running processes found\n")]
    )  # fmt: skip
    baseline = baseline_from(GpuSnapshot(parse_gpu_memory(UNIFIED), ()), None)
    status = await wait_released(probe, baseline, None, timeout=5.0, poll_interval=0.01)
    assert status.released and status.method == "compute-processes"
    assert probe.answers == [(UNIFIED, "No running processes found\n")]


async def test_a_live_unit_process_is_never_released() -> None:
    probe = _Probe([(UNIFIED, "[Not Supported]\n")])
    baseline = baseline_from(GpuSnapshot(parse_gpu_memory(UNIFIED), ()), None)

    async def cgroup_empty() -> bool:
        return False

    with pytest.raises(MemoryNotReleased) as caught:
        await wait_released(
            probe, baseline, None, unit_pids_gone=cgroup_empty, timeout=0.05, poll_interval=0.01
        )
    assert caught.value.evidence["unit_processes_alive"] is True
    assert caught.value.evidence["method"] == "compute-processes"


def test_simulated_unified_host_prints_na_and_still_lists_processes() -> None:
    spec = GpuHostSpec.build("spark", count=1, name="NVIDIA GB10", memory_reporting="unified")
    registration = Registration(pid=4242, gpus=(0,), used_mib=90000, started=0.0)
    snapshot = account(spec, [(registration, True)], now=1.0)
    memory = nvidia_smi.render(SMI_MEMORY, snapshot, spec.driver_version)
    assert memory.stdout == f"0, {spec.gpus[0].uuid}, [N/A], [N/A]\n"
    with_units = nvidia_smi.render(
        ["--query-gpu=memory.used,memory.free", "--format=csv"], snapshot, spec.driver_version
    )
    assert with_units.stdout == "memory.used [MiB], memory.free [MiB]\n[N/A], [N/A]\n"
    apps = nvidia_smi.render(SMI_APPS, snapshot, spec.driver_version)
    assert apps.stdout == f"{spec.gpus[0].uuid}, 4242, 90000\n"
    assert GpuHostSpec.from_json(spec.to_json()) == spec


class _Process:
    pid = 4242
    usedGpuMemory = 90000 * 1024 * 1024


async def test_nvml_not_supported_memory_is_unreported(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML on a GB10 answers NOT_SUPPORTED for memory and still lists compute processes."""
    import pynvml

    from orchestrator.host.gpu import NvmlProbe

    def not_supported(handle: object) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 1)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda index: object())
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda handle: U0)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", not_supported)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", lambda h: [_Process()])
    probe = NvmlProbe()
    try:
        snapshot = await probe.snapshot()
    finally:
        probe.close()
    (gpu,) = snapshot.gpus
    assert not gpu.reports_memory
    assert [(p.gpu_uuid, p.pid, p.used_mib) for p in snapshot.processes] == [(U0, 4242, 90000)]
    assert baseline_from(snapshot, None).method == "compute-processes"
