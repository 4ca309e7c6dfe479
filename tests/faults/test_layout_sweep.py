"""A demo-sized sweep on a simulated host whose SGLang layout flags put ``ATTN_CP`` and
``MOE_DP`` tags in its log prefixes (issue 14): with the chat API the journal is the one
per-point source besides ``/metrics``, so every point must still get its accept length from the
decode lines, and a DDTree trial's provenance holds what its worker logged at init.

Runs on the fault harness (address 127.0.0.131 is this test's)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.sim.host import render_unit, sglang_argv
from tests.faults.harness import fault_host, run, sweep_yaml

ADDRESS = "127.0.0.131"
LAYOUT = ["--attn-cp-size", "2", "--moe-dp-size", "2", "--ep-size", "4"]
DFLASH = {"algorithm": "DFLASH", "draft_model": "z-lab/dflash", "draft_tokens": 8}
DDTREE = {"algorithm": "DDTREE", "draft_model": "z-lab/dflash", "draft_tokens": 8}


async def test_a_sweep_on_an_attn_cp_moe_dp_host_gets_accept_len_from_every_source(
    tmp_path: Path,
) -> None:
    # The base unit is TP 8 with --enable-metrics; the layout makes its prefixes
    # `ATTN_CP0 MOE_DP0 TP0 EP0`, and decode lines every 4 iterations keep the sweep small.
    argv = [*sglang_argv(ADDRESS), *LAYOUT, "--decode-log-interval", "4"]
    unit = render_unit(argv, description="SGLang server (ATTN_CP/MOE_DP layout, simulated)")
    settings = {"ddtree": True, "unit_running": False}
    async with fault_host(tmp_path, ADDRESS, settings=settings, unit=unit) as host:
        text = sweep_yaml(
            host,
            "layout",
            [DFLASH, DDTREE],
            knobs={"draft_model": {"flag": "--speculative-draft-model-path"}},
            benchmark={"max_tokens": 96, "concurrency": [2]},
        )
        result = await run(tmp_path, text)
        journal = await host.journal()
    assert any(" ATTN_CP1 MOE_DP1 TP4 EP0] Decode batch" in line for line in journal)
    assert result.outcome.state == "done", result.results
    for config in (DFLASH, DDTREE):
        trial = result.trial(config)
        assert trial["state"] == "done", trial
        (point,) = [p for p in trial["points"] if p["kind"] == "throughput"]
        accept = point["accept_len"]
        assert accept["accept_len_journal"] is not None and accept["accept_len_journal"] >= 1.0
        assert accept["accept_len_journal_lines"] > 0
        assert accept["accept_len_metrics"] is not None
        assert "no_decode_lines" not in accept["accept_len_flags"]
    provenance = result.trial(DDTREE)["evidence"]["provenance"]
    assert provenance["worker_init"]["ddtree_init"] == {
        "block_size": 8,
        "tree_budget": 7,
        "max_tree_nodes": 8,
    }
    assert provenance["worker_init"]["dflash_init"]["block_size"] == 8
