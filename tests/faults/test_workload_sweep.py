"""A sweep on a simulated host with an operator's traffic sample, a built-in realistic set and
open-loop rate points (issue 15), end to end through the real runner, store and report: every
point names its workload, rate points carry offered and achieved rates and goodput, the
report shows accept_len per workload and goodput per rate.

Runs on the fault harness (address 127.0.0.216 is this test's)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from orchestrator.report import render_report
from orchestrator.store import Store
from orchestrator.sweepfile import load_sweep_with_text
from tests.faults.harness import fault_host, sweep_yaml
from tests.faults.harness import run as run_text

ADDRESS = "127.0.0.216"
DFLASH = {"algorithm": "DFLASH", "draft_model": "z-lab/dflash", "draft_tokens": 8}


def _traffic(path: Path) -> None:
    """An operator-style sample: chat requests with their real output lengths, code and prose."""
    lines = []
    for n in range(12):
        question = (
            f"def total_{n}(items):\n    return sum(item.price for item in items)\n\n"
            "Why does this function fail on an empty basket, and how would you fix it?"
            if n % 2
            else f"Our team of {n + 3} people plans an offsite. Which city should we pick, "
            "and what should the agenda look like?"
        )
        lines.append({"messages": [{"role": "user", "content": question}], "output_tokens": 12})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


async def test_a_sweep_over_a_traffic_sample_a_builtin_set_and_rate_points(
    tmp_path: Path,
) -> None:
    _traffic(tmp_path / "traffic.jsonl")
    async with fault_host(tmp_path, ADDRESS) as host:
        document = yaml.safe_load(
            sweep_yaml(
                host,
                "workloads",
                [DFLASH],
                knobs={"draft_model": {"flag": "--speculative-draft-model-path"}},
                benchmark={
                    "contexts": [256],
                    "concurrency": [2],
                    "rate": [4],
                    "rate_duration_s": 1.0,
                    "max_concurrency": 8,
                    "workloads": [{"file": "traffic.jsonl"}, {"builtin": "codegen"}],
                    "output_lengths": "workload",
                    "slo": {"ttft_ms": 5000, "tpot_ms": 1000},
                },
            )
        )
        sweep_file = tmp_path / "workloads.yaml"
        sweep_file.write_text(yaml.safe_dump(document, sort_keys=False))
        sweep, text = load_sweep_with_text(sweep_file)
        result = await run_text(tmp_path, text, sweep=sweep)
    assert result.outcome.state == "done", result.results
    trial = result.trial(DFLASH)
    points = {
        (p["workload"], p["concurrency"], p["rate"]): p
        for p in trial["points"]
        if p["kind"] == "throughput"
    }
    assert set(points) == {
        ("file:traffic.jsonl", 2, None),
        ("file:traffic.jsonl", None, 4.0),
        ("builtin:codegen", 2, None),
        ("builtin:codegen", None, 4.0),
    }
    for point in points.values():
        metrics = point["metrics"]
        assert metrics["prompt_tokens_tolerance"] == 0  # exact lengths from real prompts
        assert metrics["calibration"]["method"] != "filler"
        assert metrics["goodput"] is not None and metrics["slo"]["ttft_s"] == 5.0
    traffic = points[("file:traffic.jsonl", 2, None)]["metrics"]
    assert traffic["output_len_max"] == 12  # each request's own output length
    rate_point = points[("builtin:codegen", None, 4.0)]["metrics"]
    assert rate_point["arrival_schedule"] and rate_point["arrivals"] == "poisson"
    assert rate_point["achieved_rate"] is not None and rate_point["requests_scheduled"] >= 1

    async with await Store.open(tmp_path / "orchestrator.db") as store:
        markdown = await render_report(store, [result.outcome.sweep_id], "md")
    assert "### Per workload" in markdown
    assert "file:traffic.jsonl accept_len" in markdown
    assert "builtin:codegen accept_len" in markdown
    assert "### Open loop, context 256 tokens, workload builtin:codegen" in markdown
    assert "4/s goodput" in markdown
