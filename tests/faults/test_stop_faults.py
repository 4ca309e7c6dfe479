"""What an old server leaves behind when it is stopped: processes that linger, memory that is
never given back, processes stuck in the driver past SIGKILL. The unit is never started over
memory still held; the evidence is the leftover PIDs and the journal's own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faults.harness import (
    ENGINES,
    FAULTY,
    HEALTHY,
    OTHER,
    assert_restored,
    fault_host,
    on_faulty,
    point_count,
    run,
    sweep_yaml,
    unit_text,
)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
async def test_old_process_lingering_after_stop(tmp_path: Path, engine: str) -> None:
    """KillMode=process: the stop ends the main process (which serves on for a while after
    SIGTERM), its scheduler child holds the GPUs for 3 s more. The next server is started only
    once the child is gone: systemd never finds a left-over process at start."""
    case = ENGINES[engine]
    address = "127.0.0.124" if engine == "sglang" else "127.0.0.226"
    async with fault_host(
        tmp_path,
        address,
        unit=case.unit_text(address, kill_mode="process"),
        server={"stop_delay_s": 20.0},  # 1 s of serving after SIGTERM
        server_faults={"leftover_child_s": case.on_faulty(60.0)},  # 3 s after the main process
        engine=engine,
    ) as host:
        done = await run(tmp_path, case.sweep_yaml(host, "lingering", [case.faulty, case.healthy]))

        first, second = done.trial(case.faulty), done.trial(case.healthy)
        assert first["state"] == "done" and second["state"] == "done", done.results
        assert point_count(second) == 1
        # the stop after FAULTY: the main process served on ~1 s, then the child held ~3 s
        stops = done.of_kind("unit.stopped")
        releases = done.of_kind("memory.released")
        assert stops[1]["waited_s"] >= 0.9
        assert releases[1]["waited_s"] >= 2.5, releases
        journal = "\n".join(await host.journal())
        assert "remains running after unit stopped" in journal
        assert "Found left-over process" not in journal
        # the NEW process serves HEALTHY's config, not the old one's
        assert second["evidence"]["invocation_id"] != first["evidence"]["invocation_id"]
        await assert_restored(host)


async def test_memory_held_by_a_leftover_is_never_released(tmp_path: Path) -> None:
    """A leftover child that never exits keeps its GPU memory: every later trial fails with
    ``memory-not-released``, its PIDs as evidence, and the unit is NOT started. The restore
    puts the files back but does not start the unit over held memory either."""
    address = "127.0.0.125"
    async with fault_host(
        tmp_path,
        address,
        unit=unit_text(address, kill_mode="process"),
        server_faults={"leftover_child_s": on_faulty(-1.0)},
    ) as host:
        text = sweep_yaml(
            host, "never-released", [FAULTY, HEALTHY, OTHER], timeouts={"memory_release": 2}
        )
        done = await run(tmp_path, text)

        assert done.trial(FAULTY)["state"] == "done"
        for config in (HEALTHY, OTHER):  # the sweep went on, and each is refused
            failed = done.trial(config)
            assert (failed["state"], failed["cause"]) == ("failed", "memory-not-released")
            leftovers = failed["evidence"]["leftovers"]
            assert {item["gpu"] for item in leftovers} == set(range(8))
            assert len({item["pid"] for item in leftovers}) == 1
            assert point_count(failed) == 0
        (pid,) = {item["pid"] for item in done.trial(HEALTHY)["evidence"]["leftovers"]}
        assert Path(f"/proc/{pid}").exists()  # the evidence names a process that is really there
        # after the leftover appeared, no unit.starting at all: restore did not start it either
        kinds = done.kinds()
        leftover_seen = kinds.index("memory.not_released")
        assert "unit.starting" not in kinds[leftover_seen:]
        state = await host.show("ActiveState", "DropInPaths")
        assert state == {"ActiveState": "inactive", "DropInPaths": ""}
        assert host.unit_files() == host.unit_files_before
        (record,) = done.results["hosts"]
        assert "memory-not-released" in (record["set_aside"] or ""), record


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
async def test_memory_never_released_by_the_driver(tmp_path: Path, engine: str) -> None:
    """No process left, yet ``memory.used`` never comes back to the idle baseline (read before
    the first stop): the trial fails with the excess per GPU and the unit is not started."""
    case = ENGINES[engine]
    async with fault_host(
        tmp_path,
        "127.0.0.126" if engine == "sglang" else "127.0.0.227",
        settings={"memory_never_released": True},
        engine=engine,
    ) as host:
        text = case.sweep_yaml(
            host, "driver-leak", [case.healthy, case.other], timeouts={"memory_release": 2}
        )
        done = await run(tmp_path, text)

        for config in (case.healthy, case.other):
            failed = done.trial(config)
            assert (failed["state"], failed["cause"]) == ("failed", "memory-not-released")
            evidence = failed["evidence"]
            assert evidence["leftovers"] == []
            assert all(mib >= 80000 for mib in evidence["excess_mib"].values()), evidence
        baseline = done.of_kind("gpu.baseline")[0]
        assert set(baseline["used_mib"].values()) == {3}
        assert "unit.starting" not in done.kinds()
        assert (await host.show("ActiveState"))["ActiveState"] == "inactive"
        assert host.unit_files() == host.unit_files_before


async def test_process_surviving_sigkill(tmp_path: Path) -> None:
    """Processes stuck in D-state: SIGTERM does nothing, SIGKILL leaves them 'around', systemd
    gives up and enters failed mode while their memory is still held. The orchestrator waits
    for the memory, clears the failed state and only then starts the next server."""
    address = "127.0.0.127"
    async with fault_host(
        tmp_path,
        address,
        unit=unit_text(address, timeout_stop_s=1),
        settings={"survives_sigkill_s": 2.5},
    ) as host:
        done = await run(tmp_path, sweep_yaml(host, "d-state", [HEALTHY]))

        trial = done.trial(HEALTHY)
        assert trial["state"] == "done" and point_count(trial) == 1
        stopped = done.of_kind("unit.stopped")[0]
        assert stopped["result"] == "timeout" and stopped["waited_s"] >= 1.8
        assert done.of_kind("memory.released")[0]["waited_s"] >= 0.3
        journal = "\n".join(await host.journal())
        assert "State 'stop-sigterm' timed out. Killing." in journal
        assert "Processes still around after final SIGKILL. Entering failed mode." in journal
        assert "Found left-over process" not in journal
        await assert_restored(host)
