"""``server.metrics: auto`` on a host whose unit runs without ``--enable-metrics``: a chat
sweep's trial gets the flag in its drop-in, its provenance says it was added, and /metrics is
then an accept-length source beside the journal."""

from __future__ import annotations

from pathlib import Path

from orchestrator.sim.host import render_unit, sglang_argv
from tests.faults.harness import HEALTHY, assert_restored, fault_host, point_count, run, sweep_yaml


async def test_auto_gives_a_chat_sweep_its_metrics(tmp_path: Path) -> None:
    address = "127.0.0.131"
    argv = [word for word in sglang_argv(address) if word != "--enable-metrics"]
    unit = render_unit(argv, description="SGLang server (no metrics, simulated)")
    async with fault_host(tmp_path, address, unit=unit) as host:
        done = await run(tmp_path, sweep_yaml(host, "metrics-auto", [HEALTHY]))

        trial = done.trial(HEALTHY)
        assert trial["state"] == "done" and point_count(trial) == 1, done.results
        provenance = trial["evidence"]["provenance"]
        assert provenance["added_flags"] == ["--enable-metrics"]
        assert provenance["exec_start"].count("--enable-metrics") == 1
        (point,) = [p for p in trial["points"] if p["kind"] == "throughput"]
        assert point["accept_len"]["accept_len_metrics"] is not None, point["accept_len"]
        (preflight,) = done.of_kind("preflight")
        assert preflight["warnings"] == []
        await assert_restored(host)
