"""Sweep files: good ones load; bad ones name every problem by line and field path.

Each bad file under tests/data/sweeps/bad/ ends with ``# expect: LINE PATH | text`` lines
(``-`` for the document itself). The problems found must be exactly those (line, path)
pairs, each message containing the expected text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.sweepfile import (
    MAX_FILE_BYTES,
    HostSpec,
    KnobMapping,
    Problem,
    Sweep,
    SweepFileError,
    check_sweep,
    check_sweep_text,
    format_path,
    load_sweep,
    load_sweep_with_text,
    parse_duration,
    parse_sweep,
    rules,
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
    problems = _problems(MINIMAL + "\n".join(lines) + "\nbaseline: true\n")
    aliases = [p for p in problems if "alias *l" in p.message]
    # every alias named at its own line, none expanded (10^9 of them would never come back)
    assert len(aliases) == 90
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


# --- issue 12: operators' spellings of exec_start and argv numbers; repeated extra flags


def test_exec_start_one_line_is_split_as_systemd_splits_it() -> None:
    checked = check_sweep(CORPUS / "good" / "exec_start_line.yaml")
    assert checked.sweep.server.exec_start == [
        "/opt/sglang/.venv/bin/python", "-m", "sglang.launch_server",
        "--model-path", "/models/Kimi K2.6", "--tp-size", "8", "--mem-fraction-static", "0.85",
        "--served-model-name", "kimi-k2.6", "--chat-template", "100% $HOME",
        "--speculative-ddtree-budget", "4",
    ]  # fmt: skip
    listed = parse_sweep(
        MINIMAL + '  exec_start: [/usr/bin/python3, --chat-template, "100% $HOME"]\n'
        "baseline: true\n"
    )
    line = parse_sweep(
        MINIMAL + "  exec_start: '/usr/bin/python3 --chat-template \"100%% $$HOME\"'\n"
        "baseline: true\n"
    )
    assert line.server.exec_start == listed.server.exec_start


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("/usr/bin/python3 --model /m/%n", "unit specifier %n"),
        ("/usr/bin/python3 $MODEL", "environment expansion"),
        ("/usr/bin/python3 --x ${MODEL}", "environment expansion ${...}"),
        ("/usr/bin/python3 ; /bin/reboot", "command separator ';'"),
        ("/usr/bin/python3 'open", "unterminated quote"),
        ('/usr/bin/python3 "a\\nb"', "contains a newline once its escapes are decoded"),
        ("   ", "at least 1 item"),
    ],
)
def test_exec_start_one_line_gets_the_list_forms_checks(line: str, message: str) -> None:
    text = MINIMAL + f"  exec_start: {json.dumps(line)}\nbaseline: true\n"
    problems = _problems(text)
    assert [(p.line, p.field_path) for p in problems] == [(9, "server.exec_start")], problems
    assert message in problems[0].message


def test_numbers_in_argv_lists_become_text() -> None:
    sweep = parse_sweep(
        MINIMAL + "  exec_start: [/usr/bin/python3, --tp-size, 8, --mem-fraction-static, 0.85]\n"
        "  extra_flags: [--decode-log-interval, 40]\nbaseline: true\n"
    )
    assert sweep.server.exec_start == [
        "/usr/bin/python3", "--tp-size", "8", "--mem-fraction-static", "0.85"
    ]  # fmt: skip
    assert sweep.server.extra_flags == ["--decode-log-interval", "40"]
    problems = _problems(MINIMAL + "  extra_flags: [--x, true, .inf]\nbaseline: true\n")
    assert [(p.line, p.field_path) for p in problems] == [
        (9, "server.extra_flags[1]"),
        (9, "server.extra_flags[2]"),
    ]
    assert "boolean is ambiguous" in problems[0].message
    assert "not a finite number" in problems[1].message


def test_an_extra_flag_the_exec_start_has_with_the_same_value_is_a_warning() -> None:
    text = (
        MINIMAL + "  exec_start: /usr/bin/python3 --enable-metrics --tp-size 8\n"
        "  extra_flags:\n    - --enable-metrics\n    - --tp-size=8\n    - --x\nbaseline: true\n"
    )
    checked = check_sweep_text(text, "s.yaml")
    assert [str(w) for w in checked.warnings] == [
        "s.yaml:11: server.extra_flags[0]: --enable-metrics is already on the command line "
        "(server.exec_start or an earlier extra flag): it is not repeated",
        "s.yaml:12: server.extra_flags[1]: --tp-size=8 is already on the command line "
        "(server.exec_start or an earlier extra flag): it is not repeated",
    ]
    assert checked.sweep.server.extra_flags == ["--enable-metrics", "--tp-size=8", "--x"]


def test_an_extra_flag_the_exec_start_has_with_another_value_is_an_error() -> None:
    text = (
        MINIMAL + "  exec_start: [/usr/bin/python3, --tp-size, 8, --enable-metrics]\n"
        "  extra_flags: [--tp-size, 4, --enable-metrics=1]\nbaseline: true\n"
    )
    problems = _problems(text, "s.yaml")
    assert [str(p) for p in problems] == [
        "s.yaml:10: server.extra_flags[0]: --tp-size is '4' here but '8' on the command line "
        "already (server.exec_start or an earlier extra flag); give it once",
        "s.yaml:10: server.extra_flags[2]: --enable-metrics is '1' here but bare on the "
        "command line already (server.exec_start or an earlier extra flag); give it once",
    ]


def test_a_knob_flag_in_exec_start_is_not_a_repeat_of_extra_flags() -> None:
    """The knob's flag is removed from the base before extra_flags join it, as in a trial."""
    text = (
        MINIMAL + "  exec_start: [/usr/bin/python3, --speculative-ddtree-budget, 8]\n"
        "  extra_flags: [--y]\nconfigs: [{budget: 4}]\n"
    )
    assert check_sweep_text(text).warnings == ()


def test_rules_read_typed_parts_even_where_other_parts_are_broken() -> None:
    """A host that does not parse still has its name checked; a knob whose mapping does not
    parse is still declared (configs using it are not 'unknown')."""
    parts = rules.parts_of(
        {
            "hosts": [{"name": "h1", "address": "10.0.0.1", "base_url": "ftp://x"}, {"port": "x"}],
            "server": {"knobs": {"budget": {"flag": "bad flag"}}},
            "configs": [{"budget": 4, "topk": [1]}],
        }
    )
    assert parts.hosts[0].name == "h1" and parts.hosts[0].port == 22
    assert parts.hosts[1].name is None and parts.hosts[1].port is None
    assert parts.knob_names == ["budget"] and parts.knobs[0].mapping is None
    values = {use.knob: use.value for use in parts.uses}
    assert values["budget"] == 4 and not isinstance(values["topk"], int | list)
    found = [str(f.path) + f.message for f in rules.undeclared_knobs(parts)]
    assert found == [
        "('configs', 0, 'topk')unknown key: not in server.knobs (expected one of: budget)"
    ]
