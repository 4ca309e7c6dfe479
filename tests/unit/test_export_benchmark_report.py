"""``export --format benchmark-report``: llm-d Benchmark Reports from a sweep's results.

Every document is held to llm-d's JSON Schema (the copy in tests/data/benchmark_report, its
source named there) and read back by llm-d's own models (``llmd-benchmark-report``, which also
check each statistic's units); one document is checked field by field.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import socketserver
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from llmd_benchmark_report import load_benchmark_report

from orchestrator.cli import main
from orchestrator.engines.base import Provenance
from orchestrator.evidence import ServerEvidence, Timeline
from orchestrator.export.benchmark_report import (
    BENCHMARK_REPORT_VERSION,
    EngineLaunch,
    benchmark_reports,
    config_hash,
    native_args,
    parallelism,
    report_filename,
)
from orchestrator.host.gpu import GpuIdentity
from orchestrator.host.launchfile import LaunchFile
from orchestrator.store import Store, SweepResults, TrialPlan
from orchestrator.store.results import (
    AcceptEstimate,
    AcceptLength,
    LatencySummary,
    PointProvenance,
    ThroughputMetrics,
    ThroughputPoint,
    TrialOutcome,
)
from orchestrator.types import MatrixCell
from tests.integration.test_report_support import demo_like_spec, fill_sweep

DATA = Path(__file__).resolve().parents[1] / "data" / "benchmark_report"
SCHEMA_PATH = DATA / "br_v0_2_1_json_schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def report_problems(document: Mapping[str, Any]) -> list[str]:
    """Where ``document`` breaks llm-d's JSON Schema or llm-d's own models (empty: none)."""
    problems = [
        f"{'/'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in VALIDATOR.iter_errors(document)
    ]
    try:
        load_benchmark_report(json.loads(json.dumps(document)))
    except (ValueError, TypeError) as error:  # pydantic's ValidationError is a ValueError
        problems.append(f"llmd_benchmark_report: {error}")
    return problems


def test_the_saved_schema_is_a_valid_json_schema_of_the_revision_written() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["title"] == f"Benchmark Report v{BENCHMARK_REPORT_VERSION}"
    assert SCHEMA["properties"]["version"]["default"] == BENCHMARK_REPORT_VERSION


# --- a synthetic sweep, as the runner stores one ---------------------------------------------


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "store.db"

    async def fill() -> None:
        async with await Store.open(path) as store:
            await fill_sweep(store, demo_like_spec("nightly-ddtree"))

    asyncio.run(fill())
    return path


@pytest.fixture(scope="module")
def stored(store_path: Path) -> SweepResults:
    async def read() -> SweepResults:
        async with await Store.open(store_path) as store:
            return await store.results("nightly-ddtree")

    return asyncio.run(read())


def test_every_point_of_a_synthetic_sweep_is_a_valid_report(stored: SweepResults) -> None:
    exported = benchmark_reports(stored)
    done = [t for t in stored.trials if t.state == "done"]
    assert len(exported.reports) == sum(len(t.throughput) for t in done) > 0
    assert exported.skipped_points == 0  # the failed configs measured nothing
    for report in exported.reports:
        assert report_problems(report.document) == [], report.filename
    names = [report.filename for report in exported.reports]
    assert len(set(names)) == len(names)
    uids = {report.document["run"]["uid"] for report in exported.reports}
    assert len(uids) == len(names)
    assert len({report.document["run"]["eid"] for report in exported.reports}) == 1
    # The same store exports the same documents (a results store can dedupe by uid).
    assert benchmark_reports(stored) == exported


def test_the_spec_configs_carry_vllm_bench_fields_and_the_baseline_none(
    stored: SweepResults,
) -> None:
    for report in benchmark_reports(stored).reports:
        knobs = report.document["scenario"]["load"]["native"]["config"]["knobs"]
        observability = report.document["results"].get("observability")
        if not knobs:
            assert observability is None, report.filename
            continue
        assert observability["spec_decode_acceptance_length"] > 1.0
        assert observability["spec_decode_num_drafts"] > 0
        assert observability["spec_decode_accepted_tokens"] > 0


# --- one point, field by field ---------------------------------------------------------------

START = 1_764_547_200.0  # 2025-12-01T00:00:00Z
ARGV = (
    "/opt/sglang/.venv/bin/python", "-m", "sglang.launch_server",
    "--model-path", "/models/Kimi-K2.6", "--tp-size", "8", "--enable-metrics",
    "--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget=8",
    "--cuda-graph-bs", "1", "2", "4", "--json-model-override-args", "-1",
)  # fmt: skip


def _evidence(*, launch_files: tuple[LaunchFile, ...] = ()) -> dict[str, Any]:
    provenance = Provenance(
        engine="sglang",
        engine_version="0.5.23",
        model_path="/models/Kimi-K2.6",
        server_args={"tp_size": 8, "dp_size": 2, "speculative_algorithm": "DDTREE"},
        launch_command=" ".join(ARGV),
        gpus=(GpuIdentity("NVIDIA B300", "580.65.06"),) * 8,
        exec_start=ARGV,
        environment={"SGLANG_DDTREE_MAX_TOPK": "4", "NCCL_DEBUG": "WARN"},
        added_flags=("--enable-metrics",),
        launch_files=launch_files,
    )
    return ServerEvidence("inv-7", 4242, Timeline({"ready": START - 5}), provenance).to_json()


def _point(**changes: Any) -> ThroughputPoint:
    metrics = ThroughputMetrics(
        requests=24,
        requests_ok=23,
        errors=1,
        input_tokens=23 * 1024,
        output_tokens=23 * 256,
        output_tok_s=812.5,
        input_tok_s=3250.0,
        request_s=3.17,
        prompt_tokens_min=1024,
        prompt_tokens_max=1024,
        output_len_mean=256.0,
        output_len_p50=256.0,
        output_len_p90=256.0,
        output_len_p99=256.0,
        output_len_max=256.0,
        ttft=LatencySummary(23, 0.21, 0.2, 0.3, 0.4, 0.45),
        itl=LatencySummary(5865, 0.009, 0.008, 0.012, 0.02, 0.05),
        tpot=LatencySummary(23, 0.0095, 0.009, 0.011, 0.013, 0.014),
        e2e=LatencySummary(23, 2.64, 2.6, 2.9, 3.1, 3.2),
    )
    accept = AcceptLength(
        value=3.1,
        meta_info=AcceptEstimate(3.1, 23, exact=23),
        metrics=AcceptEstimate(3.05, 400),
    )
    fields: dict[str, Any] = {
        "context": 1024,
        "concurrency": 8,
        "metrics": metrics,
        "accept": accept,
        "quality": ("errors",),
        "provenance": PointProvenance("inv-7", "s=0;i=1", "s=0;i=9", START, START + 7.25),
    }
    return ThroughputPoint(**{**fields, **changes})


def _results(*trials: TrialOutcome) -> SweepResults:
    return SweepResults("night", 12, "done", submitted_at=START - 600, trials=trials)


def _outcome(points: tuple[ThroughputPoint, ...], **changes: Any) -> TrialOutcome:
    fields: dict[str, Any] = {
        "key": "b300-01.budget-8.3f2a9c1b07de",
        "host": "b300-01",
        "config": {"algorithm": "DDTREE", "budget": 8},
        "baseline": False,
        "state": "done",
        "evidence": _evidence(),
        "attempt": 2,
        "points": points,
        "plan": TrialPlan(
            cells=(MatrixCell(1024, 8),), rounds=3, model="kimi-k2.6", purpose="confirm", repeat=2
        ),
    }
    return TrialOutcome(**{**fields, **changes})


def _one(point: ThroughputPoint | None = None, **changes: Any) -> dict[str, Any]:
    exported = benchmark_reports(_results(_outcome((point or _point(),), **changes)))
    assert len(exported.reports) == 1
    document = exported.reports[0].document
    assert report_problems(document) == []
    return document


def test_run_names_the_point_its_sweep_and_its_measured_phase() -> None:
    run = _one()["run"]
    assert set(run) == {"uid", "eid", "description", "time"}
    assert run["time"] == {
        "start": "2025-12-01T00:00:00.000Z",
        "end": "2025-12-01T00:00:07.250Z",
        "duration": "PT7.250S",
    }
    assert run["description"] == (
        "/models/Kimi-K2.6 [night: algorithm=DDTREE budget=8 on b300-01, "
        "context 1024 / concurrency 8]"
    )
    other_attempt = _one(attempt=3)["run"]
    assert other_attempt["eid"] == run["eid"] and other_attempt["uid"] != run["uid"]


def test_the_stack_is_the_engine_as_the_attempt_ran_it() -> None:
    (engine,) = _one()["scenario"]["stack"]
    assert engine["standardized"] == {
        "kind": "inference_engine",
        "tool": "sglang",
        "tool_version": "0.5.23",
        "role": "replica",
        "replicas": 1,
        "model": {"name": "/models/Kimi-K2.6"},
        "accelerator": {"model": "NVIDIA B300", "count": 8, "parallelism": {"tp": 8, "dp": 2}},
    }
    native = engine["native"]
    assert native["args"] == {
        "--model-path": "/models/Kimi-K2.6",
        "--tp-size": "8",
        "--enable-metrics": None,
        "--speculative-algorithm": "DDTREE",
        "--speculative-ddtree-budget": "8",
        "--cuda-graph-bs": ["1", "2", "4"],
        "--json-model-override-args": "-1",
    }
    assert native["envars"] == {"SGLANG_DDTREE_MAX_TOPK": "4", "NCCL_DEBUG": "WARN"}
    assert native["config"] == {"exec_start": list(ARGV)}
    assert engine["metadata"] == {
        "schema_version": "0.0.1",
        "label": "b300-01",
        "cfg_id": config_hash({"args": native["args"], "envars": native["envars"]}),
        "description": "sglang on b300-01: algorithm=DDTREE budget=8",
    }


def test_a_launch_file_the_trial_wrote_is_part_of_the_native_config() -> None:
    written = LaunchFile("/etc/systemd/system/sglang.service.d/90-orchestrator.x.json", b"{}")
    (engine,) = _one(evidence=_evidence(launch_files=(written,)))["scenario"]["stack"]
    assert engine["native"]["config"]["launch_files"] == {written.path: "{}"}


def test_the_load_is_the_cell_with_where_it_comes_from() -> None:
    load = _one()["scenario"]["load"]
    assert load["standardized"] == {
        "tool": "orchestrator",
        "tool_version": load["standardized"]["tool_version"],
        "source": "random",
        "stage": 0,
        "input_seq_len": {"distribution": "fixed", "value": 1024},
        "concurrency": 8,
    }
    cell = {"context": 1024, "concurrency": 8, "rate": None, "workload": "synthetic"}
    assert load["metadata"] == {
        "schema_version": "0.0.1",
        "cfg_id": config_hash(cell),
        "description": "context 1024 / concurrency 8",
    }
    assert load["native"]["config"] == {
        **cell,
        "sweep": "night",
        "sweep_id": 12,
        "host": "b300-01",
        "trial": "b300-01.budget-8.3f2a9c1b07de",
        "knobs": {"algorithm": "DDTREE", "budget": 8},
        "baseline": False,
        "purpose": "confirm",
        "repeat": 2,
        "attempt": 2,
        "point": "throughput/context=1024/concurrency=8",
        "quality_flags": ["errors"],
    }


def test_an_open_loop_point_on_a_workload_has_its_rate_and_cap() -> None:
    metrics = ThroughputMetrics(
        requests=40, requests_ok=40, errors=0, arrivals="poisson", seed=7, duration_s=10.0,
        max_concurrency=256, output_tok_s=500.0, request_s=3.9,
    )  # fmt: skip
    point = _point(concurrency=None, rate=4.0, workload="builtin:chat", metrics=metrics)
    load = _one(point)["scenario"]["load"]
    assert load["standardized"]["rate_qps"] == 4.0
    assert load["standardized"]["concurrency"] == 256
    assert load["standardized"]["source"] == "sampled"
    assert load["native"]["config"]["arrivals"] == "poisson"
    key = "throughput/workload=builtin:chat/context=1024/rate=4"
    assert load["native"]["config"]["point"] == key


def test_the_aggregate_has_the_formats_units() -> None:
    aggregate = _one()["results"]["request_performance"]["aggregate"]
    assert aggregate["requests"] == {
        "total": 24,
        "failures": 1,
        "input_length": {"units": "count", "mean": 1024.0, "min": 1024, "max": 1024},
        "output_length": {
            "units": "count", "mean": 256.0, "p50": 256.0, "p90": 256.0, "p99": 256.0,
            "max": 256.0,
        },
    }  # fmt: skip
    latency = aggregate["latency"]
    assert latency["time_to_first_token"] == {
        "units": "s", "mean": 0.21, "p50": 0.2, "p90": 0.3, "p99": 0.4, "max": 0.45,
    }  # fmt: skip
    assert latency["inter_token_latency"]["units"] == "s/token"
    assert latency["inter_token_latency"]["mean"] == 0.009
    assert latency["time_per_output_token"]["units"] == "s/token"
    assert latency["request_latency"] == {
        "units": "s", "mean": 2.64, "p50": 2.6, "p90": 2.9, "p99": 3.1, "max": 3.2,
    }  # fmt: skip
    assert "normalized_time_per_output_token" not in latency  # not measured
    assert aggregate["throughput"] == {
        "input_token_rate": {"units": "tokens/s", "mean": 3250.0},
        "output_token_rate": {"units": "tokens/s", "mean": 812.5},
        "total_token_rate": {"units": "tokens/s", "mean": 4062.5},
        "request_rate": {"units": "queries/s", "mean": 3.17},
    }


def test_speculative_fields_by_vllm_bench_names() -> None:
    observability = _one()["results"]["observability"]
    assert observability == {
        "spec_decode_acceptance_length": 3.1,
        "spec_decode_num_drafts": 400,
        "spec_decode_accepted_tokens": 820,  # (3.05 - 1) x 400, from the same counters
    }
    journal_only = AcceptLength(value=2.5, journal=AcceptEstimate(2.5, 9))
    assert _one(_point(accept=journal_only))["results"]["observability"] == {
        "spec_decode_acceptance_length": 2.5
    }
    assert "observability" not in _one(_point(accept=AcceptLength()))["results"]


def test_points_of_attempts_that_did_not_finish_are_left_out() -> None:
    failed = _outcome(
        (_point(),), state="failed", cause="crashed", evidence={"excerpt": []}, attempt=1
    )
    done = _outcome((_point(),))
    exported = benchmark_reports(_results(failed, done))
    assert exported.skipped_points == 1
    assert [r.filename for r in exported.reports] == [report_filename(done, _point())]
    assert exported.reports[0].filename == (
        "b300-01.budget-8.3f2a9c1b07de.a2.context-1024_concurrency-8.json"
    )


def test_a_provenance_from_before_engines_had_names_reads_as_sglang() -> None:
    launch = EngineLaunch.from_evidence(
        {"provenance": {"sglang_version": "0.5.2", "exec_start": ["python"], "gpus": []}}
    )
    assert launch == EngineLaunch("sglang", "0.5.2", exec_start=("python",))
    assert EngineLaunch.from_evidence({"reason": "cancel"}) is None
    assert EngineLaunch.from_evidence(None) is None


def test_native_args_and_parallelism_edge_cases() -> None:
    assert native_args(["vllm", "serve", "M", "--port", "8000", "--port=8001", "-q"]) == {
        "--port": ["8000", "8001"],
        "-q": None,
    }
    assert native_args(["llama-server"]) == {}
    vllm_config = {"parallel_config": {"tensor_parallel_size": 4, "pipeline_parallel_size": 2}}
    assert parallelism(vllm_config) == {"tp": 4, "pp": 2}
    assert parallelism({"tp_size": True, "dp_size": 0}) == {}


# --- the verb --------------------------------------------------------------------------------


def test_the_verb_writes_one_valid_file_per_point(
    store_path: Path, stored: SweepResults, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "reports"
    code = main(
        ["export", "nightly-ddtree", "--format", "benchmark-report", "--db", str(store_path),
         "--output", str(out)]
    )  # fmt: skip
    assert code == 0
    expected = benchmark_reports(stored).reports
    assert sorted(p.name for p in out.iterdir()) == sorted(r.filename for r in expected)
    for report in expected:
        assert json.loads((out / report.filename).read_text()) == report.document
    assert capsys.readouterr().err.strip() == (
        f"export: wrote {len(expected)} benchmark reports to {out}"
    )


def test_the_verb_refuses_what_it_cannot_export(
    store_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["export", "--format", "benchmark-report", "--output", str(tmp_path / "x")]
    assert main([*base, "no-such-sweep", "--db", str(store_path)]) == 2
    assert "no-such-sweep" in capsys.readouterr().err
    assert main([*base, "night", "--db", str(tmp_path / "none.db")]) == 2
    assert "no such store" in capsys.readouterr().err
    assert main(["export", "night", "--db", str(store_path)]) == 2  # --format is required
    assert main([*base, "night", "--socket", str(tmp_path / "no.sock")]) == 1
    assert "no daemon answers" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


class _Daemon(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def daemon_socket(stored: SweepResults, tmp_path: Path) -> Iterator[Path]:
    """A stand-in for the daemon's API: ``GET /sweeps/{ref}/results`` answers the stored
    results as the daemon writes them (with their answers beside)."""
    body = json.dumps({**stored.to_json(), "answers": []}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            known = self.path == "/sweeps/nightly-ddtree/results"
            payload = body if known else b'{"error": "no sweep named that"}'
            self.send_response(200 if known else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def address_string(self) -> str:
            return "unix"

        def log_message(self, *args: Any) -> None:
            pass

    path = tmp_path / "api.sock"
    server = _Daemon(str(path), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_the_verb_through_the_daemon_writes_what_the_store_gives(
    daemon_socket: Path, stored: SweepResults, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "via-daemon"
    base = ["export", "--format", "benchmark-report", "--socket", str(daemon_socket)]
    assert main([*base, "nightly-ddtree", "--output", str(out)]) == 0
    expected = benchmark_reports(stored).reports
    for report in expected:
        assert json.loads((out / report.filename).read_text()) == report.document
    assert main([*base, "other", "--output", str(out)]) == 2
    assert "no sweep named that" in capsys.readouterr().err
