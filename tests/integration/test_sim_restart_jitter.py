"""A simulated server process draws its restart speed factor from the seed and its unit's
invocation, and says which (``/sim/truth``): each start of a unit is a new draw."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from orchestrator.sim.perfmodel import restart_speed_factor
from tests.integration.sim_server_proc import start_server


def _truth(url: str) -> dict[str, object]:
    with urllib.request.urlopen(f"{url}/sim/truth", timeout=5) as reply:
        body: dict[str, object] = json.loads(reply.read())
        return body


def test_each_invocation_draws_its_own_factor(tmp_path: Path) -> None:
    settings = {"seed": 5, "restart_jitter": 0.3}
    invocations = ["0f" * 16, "a1" * 16]
    factors = []
    for index, invocation in enumerate(invocations):
        server = start_server(
            tmp_path, ["--model-path", "m"], settings, env={"INVOCATION_ID": invocation},
            name=f"sim{index}",
        )
        try:
            server.wait_ready_blocking()
            factors.append(_truth(server.url)["speed_factor"])
        finally:
            server.stop()
    assert factors == [restart_speed_factor(5, inv, 0.3) for inv in invocations]
    assert factors[0] != factors[1]
