"""`orchestrator demo`: the whole product against two simulated hosts, from any directory.

The SGLang demo (the default, ``make demo``) runs once per session, at a terminal
(tests/integration/test_demo_tty.py checks its screen, log, report and store); the vLLM demo
runs here with ``--json``, off a terminal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.plan import plan_sweep
from orchestrator.verbs.demo import DEMO_RESOURCES, expected_cause, load_demo_sweep
from tests.integration.test_sim_support import processes_mentioning

REPO = Path(__file__).resolve().parents[2]


def _run_demo(tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    """``orchestrator demo --json`` in ``tmp_path``; its JSON, checked as intended, with a
    report that shows both failure kinds."""
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "demo", *options,
         "--state-dir", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # from any directory: the demo sweep ships inside the package
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert document["as_intended"] is True
    report = Path(document["report"])
    assert report.is_absolute() and report.exists()
    html = report.read_text()
    assert "<svg" in html and "invalid-config" in html and "bad-flag" in html
    return result, document


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_packaged_demo_matches_its_readable_copy(engine: str) -> None:
    sweep, text = load_demo_sweep(engine)
    assert sweep.engine == engine
    assert text == (REPO / "sweeps" / DEMO_RESOURCES[engine]).read_text()


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_demo_intends_exactly_two_failure_kinds(engine: str) -> None:
    sweep, _text = load_demo_sweep(engine)
    causes = [expected_cause(t.config) for t in plan_sweep(sweep).trials]
    per_host = len(sweep.hosts)
    assert causes.count("bad-flag") == per_host
    assert causes.count("invalid-config") == per_host
    # a baseline and at least four speculative configs on every host, most of them succeeding
    assert len(causes) >= 5 * per_host
    assert causes.count(None) >= 3 * per_host


def test_demo_on_vllm_runs_as_intended_and_prints_the_report_path(tmp_path: Path) -> None:
    """``demo --engine vllm``: the same product on simulated ``vllm serve`` hosts (about
    35 s): SGLang's flag refused by vLLM's parser in the preflight, a speculative budget
    refused at startup, the rest measured, an answer, the hosts' simulator gone."""
    result, document = _run_demo(tmp_path, "--engine", "vllm")
    trials = document["results"]["trials"]
    causes = sorted(t.get("cause") or t["state"] for t in trials)
    assert causes.count("bad-flag") == causes.count("invalid-config") == 2, causes
    assert causes.count("done") == len(trials) - 4 >= 6, causes
    bad_flag = next(t for t in trials if t.get("cause") == "bad-flag")
    assert bad_flag["evidence"]["found_by"] == "preflight"
    assert "does not allow any tokens to be scheduled" in json.dumps(
        [t["evidence"] for t in trials if t.get("cause") == "invalid-config"]
    )
    done = [t for t in trials if t["state"] == "done"]
    assert {t["evidence"]["provenance"]["engine"] for t in done} == {"vllm"}
    assert document["answers"] and document["answers"][0]["host_type"] == "sim-gpu"
    assert document["answers"][0]["best"] is not None, document["answers"]
    assert "orchestrator report demo-vllm --db" in result.stderr
    # Off a terminal every event is a JSON line, on stderr and in the demo's log file; the
    # outcome follows for whoever reads stderr.
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    kept = [json.loads(line) for line in (tmp_path / "demo.log").read_text().splitlines()]
    assert [e["event"] for e in kept] == [e["event"] for e in events]
    assert {"sweep.started", "server.ready", "sweep.finished"} <= {e["event"] for e in kept}
    assert processes_mentioning(str(tmp_path)) == []
