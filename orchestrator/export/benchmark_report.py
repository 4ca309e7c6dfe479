"""A sweep's measured points as llm-d Benchmark Reports (v0.2.1): the format llm-d-benchmark
reads and converts five other tools into, and kubernetes-sigs/inference-perf writes natively.

One document per throughput point of a done attempt:

- ``run``: a uid that names the point and stays the same on every export of the same store,
  an ``eid`` shared by every report of the sweep, the measured phase's start, end and duration;
- ``scenario.stack``: the engine as the attempt ran it, from the provenance the attempt kept:
  its version, model and GPUs; its command line as ``native.args`` (each option as written,
  with its value), its environment as ``native.envars``, the whole argv and the launch files
  the trial wrote as ``native.config``;
- ``scenario.load``: the cell (context, concurrency or rate, workload; an open-loop point's
  schedule), with ``native.config`` saying where it comes from (sweep, trial, knobs, attempt)
  and the quality flags the benchmark set;
- ``results.request_performance.aggregate``: requests, latencies and rates in the format's
  units (seconds, seconds per token, tokens/s, queries/s);
- ``results.observability``: the speculative-decoding numbers the format has no field for, by
  the names ``vllm bench serve`` writes them (``spec_decode_acceptance_length``, ...). llm-d
  keeps that object open for ad-hoc metrics (its own converters put such keys there).

A point of an attempt that did not end done is not exported: only a done attempt keeps the
record of the server that measured it. Pure: no I/O (the ``export`` verb writes the files).
The schema the documents are held to, and where it comes from: tests/data/benchmark_report/.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any, Final

from orchestrator import __version__
from orchestrator.points import read_mapping, read_text
from orchestrator.store.results import (
    AcceptLength,
    LatencySummary,
    PointProvenance,
    SweepResults,
    ThroughputMetrics,
    ThroughputPoint,
    TrialOutcome,
)
from orchestrator.types import SYNTHETIC_WORKLOAD, JsonObject

BENCHMARK_REPORT_VERSION: Final = "0.2.1"
"""The revision written: llm-d's current one, which its readers and inference-perf use (an
additive superset of 0.2; nothing here needs a field 0.2 lacks)."""
COMPONENT_SCHEMA_VERSION: Final = "0.0.1"
TOOL: Final = "orchestrator"
"""The load generator's name in ``scenario.load.standardized.tool``."""
UNKNOWN: Final = "unknown"
"""What a required text field holds when the attempt did not record it."""

_PARALLELISM: Final = {
    "tp": ("tp_size", "tensor_parallel_size"),
    "dp": ("dp_size", "data_parallel_size"),
    "pp": ("pp_size", "pipeline_parallel_size"),
    "ep": ("ep_size", "expert_parallel_size"),
}
"""The format's parallelism by the names engines report their resolved arguments under:
SGLang's ``/server_info`` (``tp_size``), vLLM's config (``tensor_parallel_size``, at the top or
under ``parallel_config``). One the engine does not report stays the format's default, 1."""

_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")
_PYTHON = re.compile(r"python[0-9.]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class EngineLaunch:
    """The server a done attempt was measured on, as its evidence keeps it (the engine's
    provenance): read once here, typed, so the documents never reach into the evidence."""

    engine: str
    version: str | None = None
    model: str | None = None
    exec_start: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    gpus: tuple[str, ...] = ()
    server_args: Mapping[str, Any] = field(default_factory=dict)
    launch_files: tuple[tuple[str, str], ...] = ()
    """(path, content) of each file the command line names that the trial wrote."""

    @classmethod
    def from_evidence(cls, evidence: Mapping[str, Any] | None) -> EngineLaunch | None:
        """None when the evidence holds no provenance (a failed or stopped attempt)."""
        provenance = read_mapping(read_mapping(evidence).get("provenance"))
        # Stores written before engines had names keep SGLang's version alone.
        engine = read_text(provenance.get("engine")) or (
            "sglang" if "sglang_version" in provenance else None
        )
        if not engine:
            return None
        version = provenance.get("engine_version") or provenance.get("sglang_version")
        gpus = provenance.get("gpus")
        files = provenance.get("launch_files")
        return cls(
            engine=engine,
            version=str(version) if version else None,
            model=read_text(provenance.get("model_path")),
            exec_start=tuple(str(word) for word in provenance.get("exec_start") or ()),
            environment={
                str(k): str(v) for k, v in read_mapping(provenance.get("environment")).items()
            },
            gpus=tuple(
                str(gpu["name"])
                for gpu in (gpus if isinstance(gpus, list) else ())
                if isinstance(gpu, Mapping) and gpu.get("name")
            ),
            server_args=dict(read_mapping(provenance.get("server_args"))),
            launch_files=tuple(
                (str(f["path"]), str(f.get("content", "")))
                for f in (files if isinstance(files, list) else ())
                if isinstance(f, Mapping) and f.get("path")
            ),
        )


@dataclass(frozen=True, slots=True)
class BenchmarkReport:
    """One document and the file name it is written under (unique within its sweep)."""

    filename: str
    document: JsonObject


@dataclass(frozen=True, slots=True)
class BenchmarkReports:
    """Every exportable point of a sweep, and how many points were left out."""

    reports: tuple[BenchmarkReport, ...]
    skipped_points: int = 0
    """Throughput points of attempts that did not end done with their server's provenance
    (a failed, stopped or still running attempt): no record says what measured them."""


def benchmark_reports(results: SweepResults) -> BenchmarkReports:
    """One report per throughput point of each done attempt, in plan then point order."""
    reports: list[BenchmarkReport] = []
    skipped = 0
    for outcome in results.trials:
        points = outcome.throughput
        launch = EngineLaunch.from_evidence(outcome.evidence) if outcome.state == "done" else None
        if launch is None:
            skipped += len(points)
            continue
        reports.extend(
            BenchmarkReport(
                report_filename(outcome, point), benchmark_report(results, outcome, point, launch)
            )
            for point in points
        )
    return BenchmarkReports(tuple(reports), skipped)


def report_filename(outcome: TrialOutcome, point: ThroughputPoint) -> str:
    """``<trial key>.a<attempt>.<point key>.json`` with only file-name-safe characters:
    ``sim-01.budget-8.3f2a9c1b07de.a1.context-1024_concurrency-8.json``."""
    cell = point.key.removeprefix("throughput/").replace("/", "_").replace("=", "-")
    name = f"{outcome.key}.a{outcome.attempt or 0}.{cell}"
    return _UNSAFE.sub("-", name) + ".json"


def benchmark_report(
    results: SweepResults, outcome: TrialOutcome, point: ThroughputPoint, launch: EngineLaunch
) -> JsonObject:
    """The report of one point of ``outcome`` (a done attempt), measured on ``launch``."""
    report_results: JsonObject = {
        "request_performance": {"aggregate": aggregate_performance(point.metrics)}
    }
    speculative = speculative_fields(point.accept)
    if speculative:
        report_results["observability"] = speculative
    return {
        "version": BENCHMARK_REPORT_VERSION,
        "run": _run(results, outcome, point, launch),
        "scenario": {
            "stack": [engine_component(outcome, launch)],
            "load": workload(results, outcome, point),
        },
        "results": report_results,
    }


def config_hash(config: Mapping[str, Any]) -> str:
    """A configuration's ``cfg_id`` as llm-d's converters make it: sha256 of its JSON with
    sorted keys."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode("utf-8")).hexdigest()


def _served_model(outcome: TrialOutcome, launch: EngineLaunch) -> str:
    """The model the server loaded, else the one the trial's plan names (the run's label and
    the stack's model say the same)."""
    return launch.model or (outcome.plan.model if outcome.plan else None) or UNKNOWN


# --- run ------------------------------------------------------------------------------------


def _sweep_identity(results: SweepResults) -> str:
    """The sweep in its store: a name, an id and when it was submitted (an id alone repeats
    across stores)."""
    return f"orchestrator:sweep/{results.sweep}/{results.id}/{results.submitted_at!r}"


def _run(
    results: SweepResults, outcome: TrialOutcome, point: ThroughputPoint, launch: EngineLaunch
) -> JsonObject:
    sweep = _sweep_identity(results)
    point_identity = f"{sweep}/{outcome.host}/{outcome.key}/{outcome.attempt}/{point.key}"
    model = _served_model(outcome, launch)
    run: JsonObject = {
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, point_identity)),
        "eid": str(uuid.uuid5(uuid.NAMESPACE_URL, sweep)),
        # llm-d's readers show the description as the run's label: "<model> [<experiment>]".
        "description": f"{model} [{results.sweep}: {outcome.label} on {outcome.host}, "
        f"{point.cell.words}]",
    }
    time = run_time(point.provenance)
    if time is not None:
        run["time"] = time
    return run


def run_time(provenance: PointProvenance) -> JsonObject | None:
    """The point's measured phase as ISO-8601 stamps (UTC) and an ISO-8601 duration."""
    start, end = provenance.started_at, provenance.finished_at
    if start is None or end is None:
        return None
    return {"start": _iso(start), "end": _iso(end), "duration": f"PT{max(end - start, 0.0):.3f}S"}


def _iso(stamp: float) -> str:
    moment = datetime.fromtimestamp(stamp, UTC).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


# --- the stack ------------------------------------------------------------------------------


def engine_component(outcome: TrialOutcome, launch: EngineLaunch) -> JsonObject:
    """The inference engine as the attempt ran it: ``standardized`` says what it is,
    ``native`` exactly how it was started."""
    args = native_args(launch.exec_start)
    envars = dict(launch.environment)
    config: JsonObject = {"exec_start": list(launch.exec_start)}
    if launch.launch_files:
        config["launch_files"] = {path: content for path, content in launch.launch_files}
    model = _served_model(outcome, launch)
    return {
        "metadata": {
            "schema_version": COMPONENT_SCHEMA_VERSION,
            "label": outcome.host,
            "cfg_id": config_hash({"args": args, "envars": envars}),
            "description": f"{launch.engine} on {outcome.host}: {outcome.label}",
        },
        "standardized": {
            "kind": "inference_engine",
            "tool": launch.engine,
            "tool_version": launch.version or UNKNOWN,
            "role": "replica",
            "replicas": 1,
            "model": {"name": model},
            "accelerator": {
                "model": ", ".join(dict.fromkeys(launch.gpus)) or UNKNOWN,
                "count": len(launch.gpus),
                "parallelism": parallelism(launch.server_args),
            },
        },
        "native": {"args": args, "envars": envars, "config": config},
    }


def native_args(argv: Sequence[str]) -> dict[str, Any]:
    """A command line's options as the format's ``native.args`` writes them (llm-d's example:
    ``--max-model-len: 1024``, a switch ``null``): each option as written with its value, its
    values as a list where several follow it, None where none does; an option given twice
    keeps each occurrence's in a list. The program and what precedes the engine's first option
    (a Python interpreter's ``-m MODULE``, ``serve MODEL``) are in ``native.config.exec_start``
    with the whole command line."""
    words = _engine_words(argv)
    given: dict[str, list[Any]] = {}
    index = next((i for i, word in enumerate(words) if _is_option(word)), len(words))
    while index < len(words):
        name, inline, written = words[index].partition("=")
        index += 1
        values = [written] if inline and name.startswith("--") else []
        if not values:
            name = words[index - 1]
            while index < len(words) and not _is_option(words[index]):
                values.append(words[index])
                index += 1
        value: str | list[str] | None = values[0] if len(values) == 1 else (values or None)
        given.setdefault(name, []).append(value)
    return {name: found[0] if len(found) == 1 else found for name, found in given.items()}


def _engine_words(argv: Sequence[str]) -> Sequence[str]:
    """The command line after its program; after a Python interpreter's own options and its
    ``-m MODULE`` or script (``python -m sglang.launch_server --tp-size 8``)."""
    if not argv or not _PYTHON.fullmatch(PurePosixPath(argv[0]).name):
        return argv[1:]
    for index, word in enumerate(argv[1:], start=1):
        if word == "-m":
            return argv[index + 2 :]
        if not word.startswith("-"):
            return argv[index + 1 :]
    return ()


def _is_option(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not _NUMBER.fullmatch(word)


def parallelism(server_args: Mapping[str, Any]) -> dict[str, int]:
    """The parallelism the engine reported it resolved (:data:`_PARALLELISM`)."""
    scopes = (server_args, read_mapping(server_args.get("parallel_config")))
    found: dict[str, int] = {}
    for name, keys in _PARALLELISM.items():
        for scope in scopes:
            for key in keys:
                value = scope.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                    found.setdefault(name, value)
    return found


# --- the load -------------------------------------------------------------------------------


def load_config(point: ThroughputPoint) -> JsonObject:
    """What shaped the point's load, by the orchestrator's own names (its ``cfg_id`` is the
    same for every config measured at that cell)."""
    metrics = point.metrics
    config: JsonObject = {
        "context": point.context,
        "concurrency": point.concurrency,
        "rate": point.rate,
        "workload": point.workload,
        **metrics.open_loop_load(),
    }
    if metrics.slo is not None:
        config["slo"] = dict(metrics.slo)
    return config


def workload(results: SweepResults, outcome: TrialOutcome, point: ThroughputPoint) -> JsonObject:
    """``scenario.load``: the cell in the format's words, and natively with where it comes
    from. Every workload is sent at the cell's exact context (calibrated prompts), so the
    input length is fixed; synthetic prompts are random common words, the others sampled."""
    standardized: JsonObject = {
        "tool": TOOL,
        "tool_version": __version__,
        "source": "random" if point.workload == SYNTHETIC_WORKLOAD else "sampled",
        "stage": 0,
        "input_seq_len": {"distribution": "fixed", "value": point.context},
    }
    if point.rate is not None:
        # As llm-d's vLLM-bench converter: the offered rate, and the cap on requests in flight.
        standardized["rate_qps"] = point.rate
        if point.metrics.max_concurrency is not None:
            standardized["concurrency"] = point.metrics.max_concurrency
    else:
        standardized["concurrency"] = point.concurrency
    config = load_config(point)
    plan = outcome.plan
    native: JsonObject = {
        **config,
        "sweep": results.sweep,
        "sweep_id": results.id,
        "host": outcome.host,
        "trial": outcome.key,
        "knobs": dict(outcome.config),
        "baseline": outcome.baseline,
        "purpose": None if plan is None else plan.purpose,
        "repeat": None if plan is None else plan.repeat,
        "attempt": outcome.attempt,
        "point": point.key,
        "quality_flags": list(point.flags),
    }
    return {
        "metadata": {
            "schema_version": COMPONENT_SCHEMA_VERSION,
            "cfg_id": config_hash(config),
            "description": point.cell.words,
        },
        "standardized": standardized,
        "native": {"config": native},
    }


# --- the results ----------------------------------------------------------------------------


def statistics(units: str, mean: float | None, **values: float | None) -> JsonObject | None:
    """A ``Statistics`` object (``mean`` is required): None when the mean was not measured."""
    if mean is None:
        return None
    return {"units": units, "mean": mean, **{k: v for k, v in values.items() if v is not None}}


def latency(summary: LatencySummary, units: str) -> JsonObject | None:
    if not summary.count:
        return None
    return statistics(
        units,
        summary.mean_s,
        p50=summary.p50_s,
        p90=summary.p90_s,
        p99=summary.p99_s,
        max=summary.max_s,
    )


def _present(fields: Mapping[str, JsonObject | None]) -> JsonObject:
    return {name: value for name, value in fields.items() if value is not None}


def aggregate_performance(metrics: ThroughputMetrics) -> JsonObject:
    """``results.request_performance.aggregate``: latencies in seconds (TTFT, E2E) and seconds
    per token (TPOT, ITL), rates in tokens/s and queries/s, lengths in tokens (``count``)."""
    aggregate: JsonObject = {"requests": _requests(metrics)}
    latencies = _present(
        {
            "time_to_first_token": latency(metrics.ttft, "s"),
            "time_per_output_token": latency(metrics.tpot, "s/token"),
            "inter_token_latency": latency(metrics.itl, "s/token"),
            "request_latency": latency(metrics.e2e, "s"),
        }
    )
    if latencies:
        aggregate["latency"] = latencies
    total = (
        None
        if metrics.input_tok_s is None or metrics.output_tok_s is None
        else metrics.input_tok_s + metrics.output_tok_s
    )
    rates = _present(
        {
            "input_token_rate": statistics("tokens/s", metrics.input_tok_s),
            "output_token_rate": statistics("tokens/s", metrics.output_tok_s),
            "total_token_rate": statistics("tokens/s", total),
            "request_rate": statistics("queries/s", metrics.request_s),
        }
    )
    if rates:
        aggregate["throughput"] = rates
    return aggregate


def _requests(metrics: ThroughputMetrics) -> JsonObject:
    """The measured requests (warm-up left out), those that failed, and their lengths: the
    prompts' over the completed requests, the outputs' as they really came."""
    requests: JsonObject = {"total": metrics.requests or 0}
    if metrics.errors is not None:
        requests["failures"] = metrics.errors
    if metrics.input_tokens is not None and metrics.requests_ok:
        requests["input_length"] = statistics(
            "count",
            metrics.input_tokens / metrics.requests_ok,
            min=metrics.prompt_tokens_min,
            max=metrics.prompt_tokens_max,
        )
    output = statistics(
        "count",
        metrics.output_len_mean,
        p50=metrics.output_len_p50,
        p90=metrics.output_len_p90,
        p99=metrics.output_len_p99,
        max=metrics.output_len_max,
    )
    if output is not None:
        requests["output_length"] = output
    return requests


def speculative_fields(accept: AcceptLength) -> JsonObject:
    """The speculative-decoding numbers by ``vllm bench serve``'s names; empty when no source
    saw drafts verified (vLLM's bench writes none then either).

    ``spec_decode_acceptance_length`` is the point's accept length (tokens per request per
    verify step, vLLM's ``1 + accepted / drafts``), the value every report shows. Where the
    engine's ``/metrics`` counters were read around the measured phase (as vLLM's bench reads
    them), ``spec_decode_num_drafts`` is their verify steps and
    ``spec_decode_accepted_tokens`` the draft tokens those steps accepted. The draft tokens
    proposed, hence vLLM's acceptance rate and per-position rates, are not measured."""
    if accept.value is None:
        return {}
    fields: JsonObject = {"spec_decode_acceptance_length": accept.value}
    counters = accept.metrics
    if counters.value is not None and counters.count > 0:
        fields["spec_decode_num_drafts"] = counters.count
        fields["spec_decode_accepted_tokens"] = round((counters.value - 1.0) * counters.count)
    return fields
