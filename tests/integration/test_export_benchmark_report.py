"""``orchestrator export --format benchmark-report`` on a store a real sweep wrote: a simulated
host from ``sim up``, the baseline and a speculative config, closed- and open-loop points,
``orchestrator run`` into a store, then the verb as an operator runs it. Every file it writes
is a valid llm-d Benchmark Report (the saved JSON Schema and llm-d's own models), one per
measured point, with the engine's command line and environment as the host ran them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.integration.daemon_proc import stop_process
from tests.unit.test_export_benchmark_report import report_problems

ADDRESS = "127.0.0.176"


def _sim_up(state: Path) -> tuple[subprocess.Popen[str], dict[str, object]]:
    port = 4100 + os.getpid() % 200
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.sim.cli", "up", "--json", "--state-dir", str(state),
         "--hosts", "1", "--time-scale", "0.05", "--base-address", ADDRESS, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        stop_process(process)
        raise AssertionError(process.stderr.read() if process.stderr else "sim up said nothing")
    return process, json.loads(line)


def _small_sweep(written_by_sim_up: Path, target: Path) -> str:
    """The sweep ``sim up`` wrote, cut to the baseline and one DDTree config at two closed
    points and one open-loop point, no coding problems."""
    sweep = yaml.safe_load(written_by_sim_up.read_text())
    sweep["name"] = "export-night"
    sweep["configs"] = sweep["configs"][:1]
    sweep["benchmark"].update(
        contexts=[60], concurrency=[1, 4], rate=[4], rate_duration_s=2, max_tokens=32
    )
    sweep.pop("coding", None)
    target.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return str(sweep["name"])


def _orchestrator(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def test_export_of_a_simulated_sweep_is_one_valid_report_per_point(tmp_path: Path) -> None:
    process, up = _sim_up(tmp_path / "state")
    try:
        name = _small_sweep(Path(str(up["sweep_file"])), tmp_path / "night.yaml")
        db = str(tmp_path / "run.db")
        run = _orchestrator("run", str(tmp_path / "night.yaml"), "--db", db, "--json")
    finally:
        stop_process(process)
    assert run.stdout, run.stderr[-3000:]
    trials = json.loads(run.stdout)["trials"]
    assert [t["state"] for t in trials] == ["done", "done"], [
        (t["state"], t["cause"], t["evidence"]) for t in trials
    ]
    assert run.returncode == 0, run.stderr[-3000:]

    out = tmp_path / "reports"
    export = _orchestrator(
        "export", name, "--format", "benchmark-report", "--db", db, "--output", str(out)
    )
    assert export.returncode == 0, export.stderr[-3000:]
    files = sorted(out.iterdir())
    assert len(files) == sum(len(t["points"]) for t in trials) == 6
    assert export.stderr.strip() == f"export: wrote 6 benchmark reports to {out}"
    documents = [json.loads(path.read_text()) for path in files]
    for path, document in zip(files, documents, strict=True):
        assert report_problems(document) == [], path.name

    rate_points = [d for d in documents if "rate_qps" in d["scenario"]["load"]["standardized"]]
    assert len(rate_points) == 2 and all(
        d["scenario"]["load"]["standardized"]["rate_qps"] == 4 for d in rate_points
    )
    speculative = [d for d in documents if d["scenario"]["load"]["native"]["config"]["knobs"]]
    assert len(speculative) == 3
    for document in speculative:
        (engine,) = document["scenario"]["stack"]
        assert engine["standardized"]["tool"] == "sglang"
        args = engine["native"]["args"]
        assert args["--speculative-algorithm"] == "DDTREE"
        assert args["--speculative-ddtree-budget"] == "8"
        assert engine["native"]["envars"]["SGLANG_DDTREE_MAX_TOPK"] == "4"
        accept = document["results"]["observability"]["spec_decode_acceptance_length"]
        assert 1.0 < accept < 9.0
    for document in documents:
        aggregate = document["results"]["request_performance"]["aggregate"]
        assert aggregate["throughput"]["output_token_rate"]["mean"] > 0
        assert aggregate["latency"]["time_to_first_token"]["units"] == "s"
        if document not in speculative:
            assert "observability" not in document["results"]
