"""Every benchmark in benchmarks/ runs here at its smallest size, so none can rot unseen: a
benchmark nothing ran crashed for weeks on a type that changed under it (issue 33, item 5).

Each runs as its own process, as a person runs it, with ``--json`` (``--smoke`` where the
quick form takes minutes), and the test holds its run and the shape of its JSON document, never
its figures: at this size, on a loaded machine, they mean nothing. search.py and coverage.py
have tests of their own (tests/unit/test_search_benchmark.py, test_coverage_benchmark.py).

serving.py and peers.py run SGLang's bench_serving (and GuideLLM, AIPerf), which peers.py
installs from the package index: not offline and not in seconds. What needs no install runs
here: serving's own half of a pair against the simulated server, the peer's output read as
serving reads it, and the code peers.py hands the peer.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.pgserver import ensure_postgres
from tests.sysdeps import CannotInstall

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
HANG_S = 300.0
"""A deadline for a hung benchmark only: each takes seconds at its smallest size."""
SUMMARY = {"n", "p50", "p95", "p99", "max", "mean"}


def run_benchmark(name: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args, "--json"],
        capture_output=True, text=True, timeout=HANG_S, cwd=ROOT, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    assert {"cpu", "cores", "python", "loadavg_at_start"} <= set(result["machine"])
    return result


def test_detect_runs_every_path_once() -> None:
    result = run_benchmark("detect", "--smoke")
    orchestrator = result["orchestrator"]
    assert orchestrator["ready"]["n"] == 2 and orchestrator["crash"]["n"] == 1
    assert set(orchestrator["ready"]) == SUMMARY
    assert orchestrator["crash_exited"]["n"] == 1  # the one crash logs no cause
    assert result["orchestrator_stuck_task_stacks"] == []
    for figure in ("ready_lag_p95_s", "ready_lag_p50_s", "crash_lag_s"):
        assert isinstance(result[figure], float), figure
    assert set(result["goals"]) == {"ready_lag_p95_s", "crash_lag_s", "memory_gate_lag_s"}
    assert result["poll_1s"]["ready"]["n"] == 1 and result["poll_1s"]["crash"]["n"] == 1
    assert "poll_10s" not in result and result["settings"]["smoke"] is True


def test_overhead_runs_a_sweep_and_accounts_for_it() -> None:
    result = run_benchmark("overhead", "--smoke")
    assert result["trials"] == result["trials_done"] == 2 and result["failed_trials"] == []
    assert list(result["per_host"]) == ["sim-01"]
    assert set(result["host_seconds"]) == {"wall", "load", "bench", "overhead"}
    assert {"between_trials", "stop", "memory_wait", "ready_lag", "restore"} <= set(
        result["gaps_s"]
    )
    assert isinstance(result["overhead_ratio"], float)
    assert result["ready_lag_s"]["n"] == 2


def test_client_measures_its_timing_error_and_capacity() -> None:
    result = run_benchmark("client", "--smoke")
    assert [(level["concurrency"], level["requests"]) for level in result["timing"]] == [
        (1, 2), (16, 16)
    ]
    for level in result["timing"]:
        assert set(level["ttft_err_ms"]) == SUMMARY and level["ttft_err_ms"]["n"] == level[
            "requests"
        ]
    assert isinstance(result["ttft_err_p99_ms"], float)
    assert isinstance(result["itl_err_p99_ms"], float)
    (ours,) = result["capacity"]
    assert ours["requests"] == 64 and ours["tokens_per_cpu_s"] > 0
    assert result["tokens_per_cpu_s_ratio_vs_sglang"] is None  # no peer without --peers


def test_scale_drives_hosts_from_one_daemon() -> None:
    result = run_benchmark("scale", "--smoke", "--sizes", "2")
    (size,) = result["sizes"]
    assert size["hosts"] == 2 and size["trials_done"] == 2 and size["hosts_never_ready"] == []
    assert size["cpu_frac_waiting"] >= 0 and size["ready_lag_s"]["n"] == 2
    assert result["cpu_frac_64_hosts"] is None  # not measured at 2 hosts


def test_scale_team_runs_three_daemons_over_one_postgresql() -> None:
    """The team shape: 8 sweeps over 8 hosts, one daemon of three SIGKILLed mid-run."""
    try:
        ensure_postgres()
    except CannotInstall as missing:
        pytest.skip(str(missing))
    result = run_benchmark("scale", "--team", "--smoke")
    assert result["sweeps"] == {"done": 8} and result["points_measured_twice"] == 0
    assert sum(result["first_claims_by_daemon"].values()) == 8
    assert result["take_overs"] == result["killed_daemon_claims"] >= 1
    assert result["claims"] == 8 + result["take_overs"]
    assert result["take_over_lag_s"]["n"] == result["take_overs"]
    assert set(result["store_write_s"]) == SUMMARY and result["store_write_p99_s"] > 0
    assert set(result["daemon_cpu_frac"]) == {"ctl-1", "ctl-2", "ctl-3"}
    assert result["daemon_cpu_frac_per_host"] >= 0


def test_selection_scores_the_pick() -> None:
    result = run_benchmark(
        "selection", "--seeds", "1", "--top", "6", "--race", "0,3", "--surfaces", "default"
    )
    assert result["seed_range"] == [0, 0]
    assert [(row["surface"], row["top"], row["race"]) for row in result["rows"]] == [
        ("default", 6, 0), ("default", 6, 3)
    ]
    for row in result["rows"]:
        assert 0.0 <= row["median_regret"] <= row["p95_regret"] <= 1.0
        assert row["miss_share"] in (0.0, 1.0)


@pytest.fixture
def benchmark_modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, ModuleType]]:
    """serving.py, peers.py and client.py imported as the benchmarks import each other (by
    bare name, from benchmarks/), and forgotten afterwards."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    before = set(sys.modules)
    try:
        yield {name: importlib.import_module(name) for name in ("serving", "peers", "client")}
    finally:
        for name in set(sys.modules) - before:
            del sys.modules[name]


def test_serving_and_peers_read_what_they_exchange(
    benchmark_modules: dict[str, ModuleType], tmp_path: Path
) -> None:
    serving, peers, client = (benchmark_modules[n] for n in ("serving", "peers", "client"))
    args = argparse.Namespace(context=256, rate=20.0, requests=4, max_tokens=8)
    base_url = f"http://{client.ADDRESS}:{serving.PORT}"

    async def our_half() -> tuple[dict[str, Any], dict[str, Any]]:
        server = client.start_server(
            tmp_path, serving.PORT, {"time_scale": 0.05, "load_s": 0.0, "warmup_s": 0.0}
        )
        try:
            await client.wait_healthy(base_url)
            await serving.flush_cache(base_url)
            started = time.monotonic()
            output = tmp_path / "ours.jsonl"
            argv = serving.ours_argv(args, base_url, 15, output, "per-request")
            await serving.run_process("orchestrator bench", argv, cwd=ROOT, timeout=HANG_S)
            point = serving.our_point(output)
            record = await serving.server_record(
                base_url, started, len(point["arrival_schedule"])
            )
        finally:
            server.terminate()
            server.wait(30)
        return point, record

    point, record = asyncio.run(our_half())
    assert point["connections"] == "per-request"
    dataset, replay, count = serving.export_requests(point, tmp_path)
    assert count == len(point["arrival_schedule"]) == args.requests
    stored = json.loads(replay.read_text())
    assert len(stored["offsets"]) == len(set(stored["prompts"])) == count
    rows = json.loads(dataset.read_text())
    assert sorted(row["conversations"][0]["value"] for row in rows) == sorted(stored["prompts"])
    ours = serving.ours_figures(point)
    assert ours["requests"] == count and ours["output_tok_s"] > 0 and ours["ttft_p50_ms"] > 0
    assert len(record["arrivals"]) == count and record["prompt_tokens"]

    # bench_serving's --output-file line (sglang 0.5.x), as serving.py reads it
    theirs_file = tmp_path / "theirs.jsonl"
    theirs_file.write_text(json.dumps({
        "completed": count, "request_throughput": 2.0, "output_throughput": 16.0,
        "median_ttft_ms": 20.0, "median_itl_ms": 15.0, "duration": 2.0,
    }) + "\n")
    theirs = serving.theirs_figures(theirs_file)
    assert {m: theirs[m] for m in serving.METRICS} == {
        "request_s": 2.0, "output_tok_s": 16.0, "ttft_p50_ms": 20.0, "itl_p50_ms": 15.0
    }

    # what peers.py hands the peers: launchers that compile, AIPerf's offline tokenizer cache
    for launcher in (peers.SGLANG_LAUNCHER, peers.SGLANG_REPLAY_LAUNCHER):
        compile(launcher, "bench_serving launcher", "exec")
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    home = peers.hub_cache(folder, tmp_path)
    repo = home / "hub" / "models--local--bench-tokenizer"
    revision = (repo / "refs" / "main").read_text()
    assert (repo / "snapshots" / revision / "tokenizer.json").read_text() == "{}"
