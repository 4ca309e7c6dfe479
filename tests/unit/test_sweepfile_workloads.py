"""The sweep file's workload, rate and goodput keys: what parses, what is refused and where,
and how a file workload's content is read (beside the sweep, or as stored) and checked."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.api import Submitted
from orchestrator.daemon.inbox import Inbox
from orchestrator.sweepfile import (
    StoredWorkloads,
    Sweep,
    SweepFileError,
    WorkloadContentMissing,
    check_sweep,
    load_sweep,
    parse_sweep,
)
from orchestrator.types import MatrixCell

BASE = """\
name: t
hosts:
  - {name: a, address: 127.0.0.1, base_url: "http://127.0.0.1:30000", type: gpu}
server:
  model: m
  knobs: {budget: {flag: --speculative-ddtree-budget}}
configs: [{budget: 8}]
"""

CHAT = {"messages": [{"role": "user", "content": "Why is the sky blue?"}], "output_tokens": 40}
SHAREGPT = {
    "conversations": [
        {"from": "human", "value": "Write a haiku about SQLite."},
        {"from": "gpt", "value": "Pages in a B-tree / ..."},
    ]
}


def sample_text(*lines: object) -> str:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def write(tmp_path: Path, benchmark: str, extra: str = "", **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / name.replace("_", ".")).write_text(text)
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "benchmark:\n" + benchmark + extra)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SweepFileError) as caught:
        load_sweep(path)
    return [str(problem) for problem in caught.value.problems]


def test_a_full_benchmark_resolves_to_typed_workloads(tmp_path: Path) -> None:
    text = sample_text(CHAT, "", SHAREGPT)
    path = write(
        tmp_path,
        "  workloads: [synthetic, {file: traffic.jsonl}, {builtin: codegen}]\n"
        "  contexts: [1024]\n  concurrency: [1]\n  rate: [2, 8.5]\n  arrivals: constant\n"
        "  rate_duration_s: 10\n  max_concurrency: 64\n"
        "  slo: {ttft_ms: 2000, tpot_ms: 100}\n  output_lengths: workload\n",
        "objective: {metric: goodput, context: 1024, rate: 8.5, workload: file:traffic.jsonl}\n",
        traffic_jsonl=text,
    )
    bench = load_sweep(path).benchmark
    assert bench.workload_labels == ("synthetic", "file:traffic.jsonl", "builtin:codegen")
    specs = bench.workload_specs()
    assert [(s.kind, s.name) for s in specs] == [
        ("synthetic", "synthetic"),
        ("file", "traffic.jsonl"),
        ("builtin", "codegen"),
    ]
    assert specs[1].content == text
    assert specs[1].content_hash == hashlib.sha256(text.encode()).hexdigest()
    assert specs[0].content is None and specs[2].content_hash is None
    assert bench.workload_files() == {"traffic.jsonl": text}
    assert (bench.rate, bench.arrivals, bench.rate_duration_s, bench.max_concurrency) == (
        [2.0, 8.5],
        "constant",
        10.0,
        64,
    )
    assert bench.slo is not None and (bench.slo.ttft_s, bench.slo.tpot_s, bench.slo.e2e_s) == (
        2.0,
        0.1,
        None,
    )
    assert bench.output_lengths == "workload" and bench.ignore_eos is True


def test_defaults_are_todays_matrix(tmp_path: Path) -> None:
    bench = load_sweep(write(tmp_path, "  contexts: [1024]\n")).benchmark
    assert bench.workload_labels == ("synthetic",) and bench.rate == []
    assert (bench.arrivals, bench.rate_duration_s, bench.max_concurrency) == ("poisson", 30.0, 256)
    assert bench.slo is None and (bench.output_lengths, bench.ignore_eos) == ("fixed", True)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("  ignore_eos: false\n", ("natural", False)),
        ("  output_lengths: natural\n", ("natural", False)),
        ("  output_lengths: fixed\n", ("fixed", True)),
        ("  ignore_eos: false\n  output_lengths: natural\n", ("natural", False)),
    ],
)
def test_output_lengths_and_ignore_eos_follow_each_other(
    tmp_path: Path, given: str, expected: tuple[str, bool]
) -> None:
    bench = load_sweep(write(tmp_path, given)).benchmark
    assert (bench.output_lengths, bench.ignore_eos) == expected


def test_benchmark_wide_contradictions_name_their_fields(tmp_path: Path) -> None:
    both = write(tmp_path, "  workload: synthetic\n  workloads: [{builtin: chat}]\n")
    assert problems(both) == [f"{both}:8: benchmark: give 'workload' or 'workloads', not both"]
    twice = write(tmp_path, "  workloads: [{builtin: chat}, synthetic, {builtin: chat}]\n")
    assert problems(twice) == [
        f"{twice}:9: benchmark.workloads: workload builtin:chat is listed twice"
    ]
    empty = write(tmp_path, "  concurrency: []\n")
    assert problems(empty) == [
        f"{empty}:8: benchmark: no points to measure: concurrency and rate are both empty "
        "(give either)"
    ]
    assert load_sweep(write(tmp_path, "  concurrency: []\n  rate: [4]\n")).benchmark.rate == [4]
    lengths = write(tmp_path, "  output_lengths: workload\n")
    assert problems(lengths) == [
        f"{lengths}:9: benchmark.output_lengths: output_lengths workload takes each request's "
        "length from a workload file or built-in set, and this benchmark has only the "
        "synthetic prompts"
    ]
    slo = write(tmp_path, "  slo: {}\n")
    assert problems(slo) == [
        f"{slo}:9: benchmark.slo: give at least one bound: ttft_ms, tpot_ms or e2e_ms"
    ]


@pytest.mark.parametrize(
    ("objective", "message"),
    [
        ("{metric: goodput, context: 1024, concurrency: 1}", "goodput counts requests meeting"),
        ("{metric: output_tok_s, context: 1024, rate: 3}", "cell context 1024 / rate 3 is not"),
        (
            "{metric: output_tok_s, context: 1024, concurrency: 1, workload: builtin:codegen}",
            "workload 'builtin:codegen' is not one of the sweep's workloads",
        ),
        ("{metric: output_tok_s, context: 1024, concurrency: 1, rate: 2}", "give one of"),
        ("{metric: output_tok_s, cells: [{context: 1024}]}", "give one of 'concurrency' or"),
    ],
)
def test_objectives_on_rates_and_workloads_are_checked(
    tmp_path: Path, objective: str, message: str
) -> None:
    path = write(tmp_path, "  contexts: [1024]\n  concurrency: [1]\n  rate: [2]\n",
                 f"objective: {objective}\n")  # fmt: skip
    found = problems(path)
    assert len(found) == 1 and found[0].startswith(f"{path}:12: objective") and message in found[0]


def test_an_objective_names_the_workload_of_a_sweep_with_several(tmp_path: Path) -> None:
    bench = "  workloads: [synthetic, {builtin: chat}]\n  contexts: [1024]\n  rate: [2]\n"
    path = write(tmp_path, bench, "objective: {metric: request_s, context: 1024, rate: 2}\n")
    assert "name the one the objective reads" in problems(path)[0]
    path = write(
        tmp_path,
        bench + "  slo: {e2e_ms: 60000}\n",
        "objective:\n  metric: goodput\n  cells:\n"
        "    - {context: 1024, rate: 2, workload: builtin:chat}\n"
        "    - {context: 1024, concurrency: 8, workload: synthetic}\n",
    )
    sweep = load_sweep(path)
    objective = sweep.objective
    assert objective is not None and not objective.minimized
    assert sweep.objective_cells() == (
        MatrixCell(1024, rate=2.0, workload="builtin:chat"),
        MatrixCell(1024, 8),
    )


def test_every_bad_line_of_a_sample_is_reported_with_its_number(tmp_path: Path) -> None:
    bad = sample_text(CHAT, "{not json", SHAREGPT, {"messages": []})
    path = write(tmp_path, "  workload: {file: traffic.jsonl}\n", traffic_jsonl=bad)
    found = problems(path)
    sample = tmp_path / "traffic.jsonl"
    assert [line.split(": ", 1)[0] for line in found] == [f"{sample}:2", f"{sample}:4"]
    assert "not JSON" in found[0] and "'messages' must be a non-empty list" in found[1]


def test_an_unreadable_or_empty_sample_is_located_at_the_sweeps_field(tmp_path: Path) -> None:
    path = write(tmp_path, "  workloads:\n    - synthetic\n    - {file: missing.jsonl}\n")
    (found,) = problems(path)
    assert found.startswith(f"{path}:11: benchmark.workloads[1].file: cannot read ")
    assert "No such file or directory" in found
    path = write(tmp_path, "  workload: {file: empty.jsonl}\n", empty_jsonl="\n\n")
    (found,) = problems(path)
    assert found.startswith(f"{path}:9: benchmark.workload.file: {tmp_path / 'empty.jsonl'}: ")
    assert "holds no request" in found


def test_a_stored_sweep_is_parsed_with_its_stored_content_only(tmp_path: Path) -> None:
    text = sample_text(CHAT)
    path = write(tmp_path, "  workload: {file: traffic.jsonl}\n", traffic_jsonl=text)
    checked = check_sweep(path)
    (tmp_path / "traffic.jsonl").unlink()  # the stored form needs no disk
    stored = parse_sweep(
        checked.text, "stored", workloads=StoredWorkloads(checked.sweep.benchmark.workload_files())
    )
    assert stored.benchmark.workload_specs() == checked.sweep.benchmark.workload_specs()
    text_only = parse_sweep(checked.text, "stored")  # answers and reports read it like this
    assert not text_only.benchmark.workloads_resolved
    with pytest.raises(WorkloadContentMissing):
        text_only.benchmark.workload_specs()
    with pytest.raises(SweepFileError) as caught:
        parse_sweep(checked.text, "stored", workloads=StoredWorkloads({}))
    assert str(caught.value) == (
        "stored:9: benchmark.workload.file: workload file traffic.jsonl was not sent with the sweep"
    )


def test_validate_names_the_bad_line_and_exits_2(tmp_path: Path) -> None:
    def validate(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "orchestrator", "validate", *args, str(path)]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    path = write(
        tmp_path, "  workload: {file: traffic.jsonl}\n", traffic_jsonl=sample_text(CHAT, "[1]")
    )
    result = validate()
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{tmp_path / 'traffic.jsonl'}:2: expected a JSON object, got list"
    ]
    good = sample_text(CHAT)
    (tmp_path / "traffic.jsonl").write_text(good)
    document = json.loads(validate("--json").stdout)
    assert document["valid"] and document["workloads"] == [
        {"label": "file:traffic.jsonl", "sha256": hashlib.sha256(good.encode()).hexdigest()}
    ]


async def test_the_inbox_refuses_a_sweep_naming_a_workload_file(tmp_path: Path) -> None:
    inbox, accepted, rejected = (tmp_path / d for d in ("inbox", "accepted", "rejected"))
    for directory in (inbox, accepted, rejected):
        directory.mkdir()
    (inbox / "traffic.jsonl").write_text(sample_text(CHAT))  # beside it: still not read
    spooled = inbox / "night.yaml"
    spooled.write_text(BASE + "benchmark:\n  workload: {file: traffic.jsonl}\n")

    async def submit(sweep: Sweep, text: str, source: str) -> Submitted:
        raise AssertionError("a sweep whose workload file was not read must not be queued")

    await Inbox(inbox, accepted, rejected, submit=submit, poll_s=1.0).take(spooled)
    error = (rejected / "night.yaml.error").read_text()
    assert error.startswith("night.yaml:9: benchmark.workload.file: the daemon reads no file")
    assert "orchestrator submit" in error and not spooled.exists()
