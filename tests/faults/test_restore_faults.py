"""A restore restarts the unit with the same clean restart as a trial: stop, wait until the GPU
memory is released, reset-failed, start, readiness. A restore by a fresh session (the daemon's
``restore``, its start-up recovery) knows no idle baseline yet; it takes one as a trial's first
restart does, and so never starts the unit over memory an old process still holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator import engines
from orchestrator.host.connect import open_host
from orchestrator.lifecycle import HostSession, restore
from orchestrator.sessions import lifecycle_timeouts
from orchestrator.sim.host import UNIT_NAME
from orchestrator.sweepfile import parse_sweep
from tests.faults.harness import (
    FAULTY,
    assert_restored,
    fault_host,
    on_faulty,
    run,
    sweep_yaml,
    unit_text,
)


async def test_a_fresh_restore_waits_for_memory_an_old_process_holds(tmp_path: Path) -> None:
    """The sweep leaves FAULTY running (``policy.restore: leave``); its scheduler child
    outlives the main process by 3 s holding the GPUs (KillMode=process). A restore by a new
    session stops it, waits those 3 s for the memory, and only then starts the unit as found:
    systemd never finds a left-over process at the start."""
    address = "127.0.0.148"
    async with fault_host(
        tmp_path,
        address,
        unit=unit_text(address, kill_mode="process"),
        server={"stop_delay_s": 20.0},  # 1 s of serving after SIGTERM
        server_faults={"leftover_child_s": on_faulty(60.0)},  # 3 s after the main process
    ) as host:
        text = sweep_yaml(host, "left-running", [FAULTY], policy={"restore": "leave"})
        done = await run(tmp_path, text)
        assert done.trial(FAULTY)["state"] == "done"
        assert host.unit_files() == host.unit_files_before  # leave: files back, FAULTY runs

        sweep = parse_sweep(text, "left-running.yaml")
        spec = sweep.hosts[0]
        events: list[tuple[str, dict[str, Any]]] = []

        async def record(kind: str, /, **fields: Any) -> None:
            events.append((kind, fields))

        handle = open_host(spec, connect_timeout=sweep.timeouts.connect)
        session = HostSession(
            host=handle,
            unit=UNIT_NAME,
            base_url=host.base_url,
            api="chat",
            model=sweep.server.model,
            timeouts=lifecycle_timeouts(sweep),
            events=record,
            engine=engines.get(sweep.engine),
        )
        try:
            assert await restore(session, "as-found") == []
        finally:
            await handle.close()

        kinds = [kind for kind, _ in events]
        assert kinds.index("gpu.baseline") < kinds.index("unit.stopping")
        released = kinds.index("memory.released")
        assert released < kinds.index("unit.starting")
        assert events[released][1]["waited_s"] >= 2.5, events[released]
        assert kinds[-2:] == ["restore.serving", "restore.done"], kinds
        assert "Found left-over process" not in "\n".join(await host.journal())
        await assert_restored(host)
