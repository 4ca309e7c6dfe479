"""vLLM sweeps end to end on simulated ``vllm serve`` hosts (issue 25): the real runner and
store, drop-ins of ``--speculative-config`` JSON built from several knobs, clean restarts
proven by ``/health``, the running config and a real generation, accept length from vLLM's
``vllm:spec_decode_*`` counters with its ``SpecDecoding metrics`` lines as the cross-check,
answers with intervals, reports naming the engine, and the hosts restored. Then the faults
that apply to vLLM: a flag its parser refuses, a speculative budget it refuses, out of memory
at start, a crash mid-benchmark.

Runs on the fault harness; addresses 127.0.0.221-225 are this file's.

Faults that run on both engines (the vLLM variant on a simulated ``vllm serve`` host with
vLLM's configs and texts, ``tests.faults.harness.ENGINES``), one per distinct cause that this
file does not already cover on vLLM:

- out of memory at start (``test_startup_faults.py::test_cuda_oom_at_start``, vLLM's
  ``Free memory on device`` line; address .242);
- a load slower than the ready timeout (``test_load_slower_than_the_ready_timeout``,
  ``ready-timeout`` while vLLM logs ``Starting to load model``; .228);
- an old process lingering after stop, readiness taken only from the new one
  (``test_stop_faults.py::test_old_process_lingering_after_stop``; .226);
- memory never released by the driver (``test_memory_never_released_by_the_driver``,
  ``memory-not-released``; .227).

Here, on vLLM only: a flag its parser refuses (``bad-flag``, by the preflight), a speculative
budget refused at startup (``invalid-config``), out of memory at start (``oom``) and a crash
mid-benchmark (``crashed``). SGLang only (engine-specific or host-level, the same code path on
either engine): the hidden-alias and ``--help`` preflight cases, start-limit, a process
surviving SIGKILL, a leftover that never exits, lost journal lines, hanging requests and the
engine seam's own test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.answers import answer_sweep
from orchestrator.report import render_report
from orchestrator.sim.host import VLLM_UNIT_NAME
from orchestrator.store import Store
from orchestrator.sweepfile import parse_sweep
from tests.faults.harness import (
    STATE_PROPS,
    FaultHost,
    fault_host,
    point_count,
    sweep_yaml,
)
from tests.faults.harness import run as run_sweep_text

KNOBS = {
    "method": {"flag": "--speculative-config", "json_key": "method"},
    "tokens": {"flag": "--speculative-config", "json_key": "num_speculative_tokens"},
    "draft": {"flag": "--speculative-config", "json_key": "model"},
    "max_seqs": {"flag": "--max-num-seqs"},
}
DRAFT = "/models/Kimi-K2.6-DFlash"
DFLASH_4: dict[str, Any] = {"method": "dflash", "tokens": 4, "draft": DRAFT}
DFLASH_8: dict[str, Any] = {"method": "dflash", "tokens": 8, "draft": DRAFT}
EAGLE3_4: dict[str, Any] = {"method": "eagle3", "tokens": 4, "draft": "/models/Kimi-K2.6-EAGLE3"}


def vllm_sweep(host: FaultHost, name: str, configs: list[dict[str, Any]], **extra: Any) -> str:
    """The harness's small sweep over ``host``, on vLLM with ``--speculative-config`` keys."""
    document = yaml.safe_load(
        sweep_yaml(host, name, configs, benchmark={"concurrency": [1, 2], "max_tokens": 48})
    )
    document["engine"] = "vllm"
    document["server"] = {"model": "kimi-k2.6", "knobs": KNOBS}
    document.update(extra)
    return yaml.safe_dump(document, sort_keys=False)


def throughput(trial: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in trial["points"] if p["kind"] == "throughput"]


async def test_a_vllm_grid_sweep_runs_end_to_end(tmp_path: Path) -> None:
    async with fault_host(tmp_path, "127.0.0.221", engine="vllm") as host:
        assert host.unit == VLLM_UNIT_NAME
        text = vllm_sweep(host, "vllm-grid", [DFLASH_4, DFLASH_8, EAGLE3_4], baseline=True)
        sweep = parse_sweep(text, "vllm-grid.yaml")
        assert sweep.unit == VLLM_UNIT_NAME  # the engine's usual unit, not written
        result = await run_sweep_text(tmp_path, text, sweep=sweep, deadline_s=240)
        assert host.unit_files() == host.unit_files_before
        assert await host.show(*STATE_PROPS) == host.state_before
        journal = await host.journal()
        async with await Store.open(tmp_path / "orchestrator.db") as store:
            markdown = await render_report(store, [result.outcome.sweep_id], "md")
    assert result.outcome.state == "done", result.results

    (preflight,) = result.of_kind("preflight")
    checks = {c["name"]: c for c in preflight["checks"]}
    assert preflight["ok"] and preflight["parser"] == "vllm", preflight
    assert "parsed 4 configs' argv" in checks["vllm_parser"]["detail"], checks
    assert checks["metrics"]["detail"] == "the engine serves /metrics without a flag"

    for config in ({}, DFLASH_4, DFLASH_8, EAGLE3_4):
        trial = result.trial(config)
        assert trial["state"] == "done", trial
        provenance = trial["evidence"]["provenance"]
        assert provenance["engine"] == "vllm" and provenance["engine_version"] == "0.33.0"
        running = provenance["server_args"]
        assert running["config_source"] == "metrics", running
        argv = provenance["exec_start"]
        if not config:
            assert "--speculative-config" not in argv and running["speculative_config"] is None
            continue
        asked = json.loads(argv[argv.index("--speculative-config") + 1])
        assert asked == {"method": config["method"], "model": config["draft"],
                         "num_speculative_tokens": config["tokens"]}  # fmt: skip
        assert running["speculative_config"] == {"num_speculative_tokens": config["tokens"]}
        logged = provenance["worker_init"]["non_default_args"]
        assert logged["speculative_config.method"] == config["method"], logged
        assert logged["speculative_config.num_speculative_tokens"] == config["tokens"]
        assert point_count(trial) == 2
        for point in throughput(trial):
            accept = point["accept_len"]
            assert accept["accept_len"] == accept["accept_len_metrics"] > 1.0, accept
            assert 1.0 < accept["accept_len_metrics"] <= config["tokens"] + 1
            # The log lines cover time intervals, not the point: a cross-check only (a line
            # may straddle two points and disagree; the counters are the number).
            assert set(accept["accept_len_flags"]) <= {"disagree", "no_decode_lines"}, accept
            journal_value = accept["accept_len_journal"]
            assert journal_value is None or 1.0 < journal_value <= config["tokens"] + 1
    assert any("SpecDecoding metrics: Mean acceptance length" in line for line in journal)

    answers = answer_sweep(result.outcome.sweep_results, sweep)
    assert answers and all(a.best is not None for a in answers), [a.to_json() for a in answers]
    for answer in answers:
        document = answer.to_json()
        assert "ci95" in json.dumps(document), document
    assert "vllm 0.33.0" in markdown, markdown[:2000]  # the report names engine and version


async def test_a_vllm_adaptive_sweep_answers_and_restores(tmp_path: Path) -> None:
    async with fault_host(tmp_path, "127.0.0.222", engine="vllm") as host:
        document = yaml.safe_load(vllm_sweep(host, "vllm-adaptive", []))
        document["configs"] = []
        document["baseline"] = True
        document["grid"] = {"method": ["dflash"], "tokens": [2, 4, 6, 8], "draft": [DRAFT]}
        document["search"] = {"strategy": "adaptive", "max_restarts": 4, "seed": 1}
        text = yaml.safe_dump(document, sort_keys=False)
        result = await run_sweep_text(tmp_path, text, deadline_s=240)
        assert host.unit_files() == host.unit_files_before
        assert await host.show(*STATE_PROPS) == host.state_before
    assert result.outcome.state == "done", result.results
    done = [t for t in result.results["trials"] if t["state"] == "done"]
    assert len(done) >= 2 and any(t["config"].get("method") == "dflash" for t in done)
    sweep = parse_sweep(text, "vllm-adaptive.yaml")
    answers = answer_sweep(result.outcome.sweep_results, sweep)
    assert answers and all(a.best is not None for a in answers)


async def test_vllm_refusals_and_crashes_are_classified(tmp_path: Path) -> None:
    """A flag vLLM's parser does not know is found by the preflight (the host's own parser),
    before anything restarts; a speculative budget with no room to schedule, which vLLM's
    parser takes (tests/integration/test_vllm_real_parser.py) and its ``VllmConfig`` refuses,
    at startup; out of memory at start and a crash mid-benchmark by vLLM's own lines. The host
    ends as found."""
    bad_flag = {**DFLASH_4, "typo": 1}
    budget = {**DFLASH_8, "max_seqs": 1024}  # 8192 batched tokens - 1024 * 8 drafts = 0
    oom = {**DFLASH_4, "tokens": 3}
    crash = {**DFLASH_4, "tokens": 5}

    def spec(tokens: int) -> str:
        keys = {"method": "dflash", "model": DRAFT, "num_speculative_tokens": tokens}
        return json.dumps(keys, sort_keys=True, separators=(",", ":"))

    faults = {
        "crash_at_start": {"value": "oom", "when_args": ["--speculative-config", spec(3)]},
        "crash_after_requests": {"value": 5, "when_args": [spec(5)]},
    }
    async with fault_host(tmp_path, "127.0.0.223", engine="vllm", server_faults=faults) as host:
        document = yaml.safe_load(vllm_sweep(host, "vllm-faults", []))
        document["server"]["knobs"]["typo"] = {"flag": "--speculative-algorithm"}
        document["configs"] = [bad_flag, budget, oom, crash, DFLASH_4]
        text = yaml.safe_dump(document, sort_keys=False)
        result = await run_sweep_text(tmp_path, text, deadline_s=240)
        assert host.unit_files() == host.unit_files_before
        assert await host.show(*STATE_PROPS) == host.state_before
    causes = {json.dumps(t["config"], sort_keys=True): t for t in result.results["trials"]}

    def trial(config: dict[str, Any]) -> dict[str, Any]:
        return causes[json.dumps(config, sort_keys=True)]

    assert trial(bad_flag)["cause"] == "bad-flag", trial(bad_flag)
    assert trial(bad_flag)["evidence"]["found_by"] == "preflight"
    assert trial(budget)["cause"] == "invalid-config", trial(budget)
    assert "does not allow any tokens to be scheduled" in json.dumps(trial(budget)["evidence"])
    assert trial(budget)["evidence"].get("found_by") != "preflight", trial(budget)["evidence"]
    assert trial(oom)["cause"] == "oom", trial(oom)
    assert "Free memory on device" in json.dumps(trial(oom)["evidence"])
    assert trial(crash)["cause"] == "crashed", trial(crash)
    assert trial(DFLASH_4)["state"] == "done", trial(DFLASH_4)


@pytest.mark.parametrize("tokens", [3, 7])
async def test_counter_accept_length_matches_the_simulators_truth(
    tmp_path: Path, tokens: int
) -> None:
    """A point's accept length from vLLM's counter deltas against the simulated server's
    own truth (accepted tokens over verify steps of the same requests): within 1 %."""
    import aiohttp

    from orchestrator import engines
    from orchestrator.bench import acceptlen

    address = "127.0.0.224" if tokens == 3 else "127.0.0.225"
    async with fault_host(tmp_path, address, engine="vllm") as host:
        text = vllm_sweep(host, "vllm-truth", [{**DFLASH_4, "tokens": tokens}])
        document = yaml.safe_load(text)
        document["policy"]["restore"] = "leave"
        result = await run_sweep_text(
            tmp_path, yaml.safe_dump(document, sort_keys=False), deadline_s=120
        )
        assert result.outcome.state == "done", result.results
        async with aiohttp.ClientSession() as http:

            async def get(path: str) -> str:
                async with http.get(host.base_url + path) as reply:
                    return await reply.text()

            before_truth, before = json.loads(await get("/sim/truth")), await get("/metrics")
            for _ in range(6):
                async with http.post(
                    host.base_url + "/v1/chat/completions",
                    json={
                        "model": "kimi-k2.6",
                        "max_tokens": 200,
                        "ignore_eos": True,
                        "messages": [{"role": "user", "content": "Write a long story."}],
                    },
                ) as reply:
                    assert reply.status == 200
            after_truth, after = json.loads(await get("/sim/truth")), await get("/metrics")
    truth = (after_truth["accepted_tokens"] - before_truth["accepted_tokens"]) / (
        after_truth["verify_steps"] - before_truth["verify_steps"]
    )
    counters = engines.get("vllm").acceptance_counters
    measured = acceptlen.from_metrics(before, after, requests=6, counters=counters)
    assert measured.value is not None
    assert measured.value == pytest.approx(truth, rel=0.01), (measured, truth)
    point = throughput(result.trial({**DFLASH_4, "tokens": tokens}))[0]["accept_len"]
    assert point["accept_len_metrics"] is not None
