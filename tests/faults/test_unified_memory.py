"""A host whose GPUs report no memory (GB10 / DGX Spark: ``[N/A]`` for memory.used/total):
the sweep runs, release is judged by the compute-process list and the unit's control group,
the preflight and the timeline say so, and no server starts over a process still listed."""

from __future__ import annotations

from pathlib import Path

from tests.faults.harness import (
    FAULTY,
    HEALTHY,
    assert_restored,
    fault_host,
    on_faulty,
    point_count,
    run,
    sweep_yaml,
    unit_text,
)


async def test_sweep_on_gpus_that_report_no_memory(tmp_path: Path) -> None:
    address = "127.0.0.128"
    async with fault_host(
        tmp_path,
        address,
        settings={"gpu_memory_reporting": "unified", "gpu_name": "NVIDIA GB10"},
        unit=unit_text(address, kill_mode="process"),
        server={"stop_delay_s": 20.0},
        # FAULTY's scheduler child outlives the unit's stop by ~3 s, listed as a compute app
        server_faults={"leftover_child_s": on_faulty(60.0)},
    ) as host:
        smi = await host.run("nvidia-smi --query-gpu=memory.used,memory.total --format=csv")
        assert "[N/A], [N/A]" in str(smi.stdout)
        done = await run(tmp_path, sweep_yaml(host, "unified", [FAULTY, HEALTHY]))

        first, second = done.trial(FAULTY), done.trial(HEALTHY)
        assert first["state"] == "done" and second["state"] == "done", done.results
        assert point_count(first) == 1 and point_count(second) == 1
        (preflight,) = done.of_kind("preflight")
        gpus = next(check for check in preflight["checks"] if check["name"] == "gpus")
        assert gpus["ok"] and "method: compute-processes" in gpus["detail"], gpus
        assert {b["method"] for b in done.of_kind("gpu.baseline")} == {"compute-processes"}
        releases = done.of_kind("memory.released")
        assert {r["method"] for r in releases} == {"compute-processes"}
        # after FAULTY: the next server waited for the leftover child to leave the list
        assert releases[1]["waited_s"] >= 2.5, releases
        journal = "\n".join(await host.journal())
        assert "Found left-over process" not in journal
        await assert_restored(host)
