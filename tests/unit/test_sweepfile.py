"""Sweep files: good ones load; bad ones name every problem by line and field path.

Each bad file under tests/data/sweeps/bad/ ends with ``# expect: LINE PATH | text`` lines
(``-`` for the document itself). The problems found must be exactly those (line, path)
pairs, each message containing the expected text.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from orchestrator.sweepfile import (
    MAX_FILE_BYTES,
    HostSpec,
    KnobMapping,
    Problem,
    Sweep,
    SweepFileError,
    format_path,
    load_sweep,
    load_sweep_with_text,
    parse_duration,
    parse_sweep,
    sweep_json_schema,
)
from orchestrator.types import content_hash

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "sweeps"
GOOD = sorted((CORPUS / "good").glob("*.yaml")) + sorted((ROOT / "sweeps").glob("*.yaml"))
BAD = sorted((CORPUS / "bad").glob("*.yaml"))
_EXPECT = re.compile(r"^# expect: (?P<line>\d+) (?P<path>.+?) \| (?P<text>.+)$")

MINIMAL = """\
name: t
hosts:
  - {name: h1, address: 127.0.0.1, base_url: "http://127.0.0.1:30000"}
server:
  model: m
  knobs:
    budget: {flag: --speculative-ddtree-budget}
    topk: {env: SGLANG_DDTREE_MAX_TOPK}
"""


def _expectations(path: Path) -> list[tuple[int, str, str]]:
    found = []
    for line in path.read_text().splitlines():
        match = _EXPECT.match(line)
        if match:
            field = "" if match["path"] == "-" else match["path"]
            found.append((int(match["line"]), field, match["text"]))
    return found


def _problems(text: str, filename: str = "sweep.yaml") -> list[Problem]:
    with pytest.raises(SweepFileError) as caught:
        parse_sweep(text, filename)
    return caught.value.problems


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_good_files_load(path: Path) -> None:
    sweep = load_sweep(path)
    assert isinstance(sweep, Sweep)
    assert sweep.hosts


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_file_names_every_problem_by_line_and_field(path: Path) -> None:
    expected = _expectations(path)
    assert expected, f"{path.name} has no '# expect:' lines"
    with pytest.raises(SweepFileError) as caught:
        load_sweep(path)
    problems = caught.value.problems
    actual_pairs = {(p.line, p.field_path) for p in problems}
    assert actual_pairs == {(line, field) for line, field, _ in expected}, "\n".join(
        map(str, problems)
    )
    for line, field, text in expected:
        messages = [p.message for p in problems if (p.line, p.field_path) == (line, field)]
        assert any(text in message for message in messages), (line, field, text, messages)
    for problem in problems:
        assert problem.file == str(path)
        assert str(problem).startswith(f"{path}:{problem.line}: ")
        assert "\n" not in str(problem)


def test_problem_str_matches_the_documented_format() -> None:
    text = MINIMAL + "grid:\n  budgte: [4, 8]\n"
    (problem,) = _problems(text, "sweep.yaml")
    assert str(problem) == "sweep.yaml:10: grid.budgte: unknown key (did you mean 'budget'?)"
    with pytest.raises(SweepFileError) as caught:
        parse_sweep(text, "sweep.yaml")
    assert str(caught.value) == str(problem)


def test_python_tag_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = (
        MINIMAL.replace("name: t", f'name: !!python/object/apply:os.system ["touch {marker}"]')
        + "baseline: true\n"
    )
    problems = _problems(text)
    assert [(p.line, p.field_path) for p in problems] == [(1, "name")]
    assert not marker.exists()


def test_billion_laughs_is_refused_quickly() -> None:
    lines = ['lol0: &l0 "lol"']
    for level in range(1, 10):
        refs = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"lol{level}: &l{level} [{refs}]")
    start = time.monotonic()
    problems = _problems(MINIMAL + "\n".join(lines) + "\nbaseline: true\n")
    assert time.monotonic() - start < 2.0
    aliases = [p for p in problems if "alias *l" in p.message]
    assert len(aliases) == 90  # every alias named at its own line, none expanded
    assert {p.line for p in aliases} == set(range(10, 19))


def test_huge_file_is_refused_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(MINIMAL + "description: " + "x" * (MAX_FILE_BYTES + 10) + "\n")
    with pytest.raises(SweepFileError) as caught:
        load_sweep(big)
    (problem,) = caught.value.problems
    assert (problem.line, problem.field_path) == (1, "")
    assert "limit" in problem.message
    problems = _problems(MINIMAL + "description: " + "x" * (MAX_FILE_BYTES + 10) + "\n")
    assert [(p.line, p.field_path) for p in problems] == [(1, "")]


def test_too_many_nodes_is_refused() -> None:
    items = ", ".join(["1"] * 25_000)
    problems = _problems(MINIMAL + f"description: [{items}]\n")
    assert len(problems) == 1
    assert "more than" in problems[0].message and problems[0].line == 9


def test_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(MINIMAL.encode() + b"description: caf\xe9\n")
    with pytest.raises(SweepFileError) as caught:
        load_sweep(path)
    assert [(p.line, p.message) for p in caught.value.problems] == [(9, "not UTF-8 text")]


def test_missing_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(SweepFileError) as caught:
        load_sweep(tmp_path / "absent.yaml")
    assert "cannot read" in caught.value.problems[0].message


def test_full_file_values() -> None:
    sweep = load_sweep(CORPUS / "good" / "full.yaml")
    assert sweep.priority == -3
    assert sweep.distribute == "across-type"
    assert sweep.timeouts.stop == 180.0
    assert sweep.timeouts.memory_release == 5400.0
    assert sweep.timeouts.ready == 900.0
    assert sweep.timeouts.request == 3903.5
    assert sweep.server.environment == {"SGLANG_LOG_MS": "1", "NCCL_DEBUG": "WARN", "RATIO": "0.5"}
    assert sweep.schedule is not None and sweep.schedule.not_before == "22:00"
    assert sweep.grid is not None and sweep.grid["window"] == [None, 2048]
    first = sweep.hosts[0]
    assert first.host_type == "h100" and first.sudo and first.jump == "ops@bastion.example:2222"
    assert sweep.hosts[2].is_local and sweep.hosts[2].host_type == "here"
    assert sweep.server.knobs["topk"].overridden_by_server
    assert sweep.server.knobs["algorithm"].server_info_key == "speculative_algorithm"


def test_yaml12_scalars_stay_strings() -> None:
    sweep = load_sweep(CORPUS / "good" / "yaml12_scalars.yaml")
    assert sweep.configs[0] == {"mode": "no", "algo": "on"}
    assert sweep.configs[1] == {"mode": "22:00"}
    assert sweep.hosts[0].gpus == [0, 1]


def test_host_effective_knobs_overlay_the_sweep_map() -> None:
    sweep = load_sweep(CORPUS / "good" / "full.yaml")
    merged = sweep.hosts[0].effective_knobs(sweep.server.knobs)
    assert list(merged) == list(sweep.server.knobs)
    assert merged["window"].flag == "--speculative-dflash-draft-window-size"
    assert merged["budget"] is sweep.server.knobs["budget"]
    other = sweep.hosts[1].effective_knobs(sweep.server.knobs)
    assert other["window"].flag == "--speculative-draft-window-size"


def test_models_reject_bad_values_directly() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        KnobMapping(flag="--a", env="B")
    with pytest.raises(ValueError):
        HostSpec(name="h", address="x y", base_url="http://h:1")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(5, 5.0), (2.5, 2.5), ("90s", 90.0), ("15m", 900.0), ("1h30m", 5400.0), ("300", 300.0)],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "15 minutes", True, None, 0, "-5s", float("nan")])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_path() -> None:
    assert format_path(("hosts", 0, "port")) == "hosts[0].port"
    assert format_path(("server", "environment", "A B")) == 'server.environment["A B"]'
    assert format_path(("x\ny",)) == '["x\\ny"]'
    assert format_path(()) == ""


def test_content_hash_and_text() -> None:
    path = ROOT / "sweeps" / "demo.yaml"
    sweep, text = load_sweep_with_text(path)
    assert text == path.read_text()
    assert content_hash(text) == content_hash(path.read_text())
    assert len(content_hash(text)) == 64 and content_hash(text) != content_hash(text + " ")
    assert sweep.name == "demo"


def test_json_schema_is_json_and_describes_the_fields() -> None:
    schema = sweep_json_schema()
    json.dumps(schema)
    assert set(schema["required"]) == {"name", "hosts", "server"}
    assert {"grid", "configs", "timeouts", "baseline"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False
    defs = schema["$defs"]
    assert defs["KnobMapping"]["properties"]["flag"]["anyOf"][0]["pattern"].startswith("^--")


def test_packaged_demo_is_identical_to_sweeps_demo() -> None:
    packaged = ROOT / "orchestrator" / "data" / "demo.yaml"
    assert packaged.read_bytes() == (ROOT / "sweeps" / "demo.yaml").read_bytes()


def test_seed_sweeps_hold_the_seeds_configs() -> None:
    for name in ("kimi-k26-dflash-rtxpro6000", "kimi-k26-dflash-b300"):
        sweep = load_sweep(ROOT / "sweeps" / f"{name}.yaml")
        assert sweep.name == name and sweep.baseline
        assert sweep.server.knobs["window"].flag == "--speculative-dflash-draft-window-size"
        assert sweep.server.knobs["topk"].env == "SGLANG_DDTREE_MAX_TOPK"
        assert [(c["budget"], c["topk"], c.get("window")) for c in sweep.configs] == [
            (8, 4, None),
            (16, 4, 2048),
            (4, 4, 2048),
            (12, 6, 2048),
        ]
        assert sweep.benchmark.contexts == [60, 1024, 4096, 8192]
        assert sweep.benchmark.concurrency == [1, 8, 32, 64]
        assert sweep.coding is not None and sweep.coding.problems == "builtin"
        assert sweep.coding.select == ["is_palindrome", "fib", "merge_sorted", "word_count", "gcd"]
