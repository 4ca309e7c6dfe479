"""The lifecycle reaches the serving engine only through the session's ``Engine``.

A second engine (vLLM) is a new implementation of :class:`orchestrator.engines.base.Engine`, handed
to the session; nothing in the restart protocol names SGLang. Here an engine that delegates to
SGLang's and counts what it is asked brings up a real trial on a simulated host and restores
it: every engine-specific step (the config's flag resolution, the journal's lines, the probe,
the running config's check, the provenance) went through it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from orchestrator.engines.sglang.engine import SGLANG
from orchestrator.host.connect import open_host
from orchestrator.lifecycle import HostSession, reconfigure, restore, trial_config
from orchestrator.sessions import lifecycle_timeouts
from orchestrator.sim.host import UNIT_NAME
from orchestrator.sweepfile import parse_sweep
from tests.faults.harness import HEALTHY, assert_restored, fault_host, sweep_yaml

ADDRESS = "127.0.0.215"  # outside the fault tests' 120-139: each test its own address


class CountingEngine:
    """SGLang's engine, with a count of each method the lifecycle calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(SGLANG, name)
        if callable(attribute):
            self.calls[name] += 0  # known, not yet called

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls[name] += 1
                return attribute(*args, **kwargs)

            return counted
        return attribute


async def test_the_lifecycle_asks_the_sessions_engine(tmp_path: Path) -> None:
    async with fault_host(tmp_path, ADDRESS) as host:
        text = sweep_yaml(host, "engine-seam", [HEALTHY])
        sweep = parse_sweep(text, "engine-seam.yaml")
        spec = sweep.hosts[0]
        engine = CountingEngine()
        handle = open_host(spec, connect_timeout=sweep.timeouts.connect)
        session = HostSession(
            host=handle,
            unit=UNIT_NAME,
            base_url=host.base_url,
            api="chat",
            model=sweep.server.model,
            timeouts=lifecycle_timeouts(sweep),
            engine=engine,  # type: ignore[arg-type]  # a duck-typed Engine
        )
        try:
            found = await session.read_found()
            config = trial_config(
                found,
                sweep=sweep.name,
                key="engine-seam",
                knobs=spec.effective_knobs(sweep.server.knobs),
                config=HEALTHY,
                engine=engine,  # type: ignore[arg-type]
            )
            server = await reconfigure(session, config)
            assert server.invocation_id
            await restore(session, "as-found")
        finally:
            await handle.close()
        for step in (
            "resolve_flag_knob",
            "parse_log_line",
            "probe_generation",
            "check_server_config",
            "build_provenance",
        ):
            assert engine.calls[step] > 0, (step, engine.calls)
        await assert_restored(host)
