"""The preflight's reading of a build's ``--help``: unknown flags, each with the build's closest
spelling when there is one (argparse's help format, as SGLang prints it); and how the host's
own parser is asked about the whole space: batches, and a verdict found by config."""

from __future__ import annotations

from orchestrator import engines
from orchestrator.engines.base import ParseCommand, ParseVerdict
from orchestrator.host import systemd
from orchestrator.plan import (
    expand_configs,
    first_key,
    plan_sweep,
    repeat_key,
    space_trials,
    trial_key,
)
from orchestrator.preflight import (
    HostCheck,
    ParseBatch,
    flag_problem,
    flags_known,
    help_command,
    help_flags,
    parse_batches,
    suggest_flags,
)
from orchestrator.sweepfile import parse_sweep

HELP = """usage: launch_server.py [-h] --model-path MODEL_PATH [--served-model-name NAME]
                        [--speculative-algorithm {EAGLE,EAGLE3,NEXTN,DFLASH}]
                        [--speculative-draft-window-size N]

options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH, --model MODEL_PATH
                        The path of the model weights.
  --speculative-num-draft-tokens SPECULATIVE_NUM_DRAFT_TOKENS
  --speculative-draft-window-size SPECULATIVE_DRAFT_WINDOW_SIZE
                        Draft window (--speculative-dflash-block-size sets the block).
  --enable-metrics      Enable Prometheus metrics.
"""


def test_help_flags_are_every_long_flag_once_in_order() -> None:
    flags = help_flags(HELP)
    assert flags[:4] == ["--model-path", "--served-model-name", "--speculative-algorithm",
                         "--speculative-draft-window-size"]  # fmt: skip
    assert "--help" in flags and "--speculative-dflash-block-size" in flags
    assert len(flags) == len(set(flags))


def test_help_is_asked_as_the_unit_runs_its_program() -> None:
    """In the unit's working directory, with its environment and the sweep's over it: an
    engine importable only through them still answers (tests/faults/test_toy_engine_sweep)."""
    unit = (
        "[Service]\nWorkingDirectory=/srv\nEnvironment=PYTHONPATH=/opt/e A=1\n"
        "ExecStart=/py -m sglang.launch_server --port 1\n"
    )
    service = systemd.merged_service([systemd.UnitFile("/etc/systemd/system/s.service", unit)])
    assert help_command(service, {"A": "2"}, engines.get("sglang")) == [
        "env", "-C", "/srv", "A=2", "PYTHONPATH=/opt/e", "/py", "-m", "sglang.launch_server",
        "--help",
    ]  # fmt: skip


def test_each_engine_says_how_its_server_lists_its_flags() -> None:
    """The ``--help`` fallback is the engine's: vLLM's console script lists its flags under
    its ``serve`` subcommand (bare ``vllm --help`` lists only subcommands)."""
    vllm, sglang = engines.get("vllm"), engines.get("sglang")
    assert vllm.help_argv(["/v/bin/vllm", "serve", "m", "--port", "1"]) == [
        "/v/bin/vllm", "serve", "--help",
    ]  # fmt: skip
    assert vllm.help_argv(["/py", "-m", "vllm.entrypoints.openai.api_server", "--port", "1"]) == [
        "/py", "-m", "vllm.entrypoints.openai.api_server", "--help",
    ]  # fmt: skip
    assert sglang.help_argv(["/py", "-m", "sglang.launch_server"]) == [
        "/py", "-m", "sglang.launch_server", "--help",
    ]  # fmt: skip
    llamacpp = engines.get("llamacpp")
    assert llamacpp.help_argv(["/b/llama-server", "-m", "x.gguf"]) == ["/b/llama-server", "--help"]


def test_unknown_flags_name_the_builds_closest_spelling() -> None:
    asked = ["--speculative-dflash-draft-window-size", "--enable-metric", "--tree-budget",
             "--enable-metrics"]  # fmt: skip
    unknown = flags_known(HELP, asked)
    assert unknown == {"--speculative-dflash-draft-window-size", "--enable-metric", "--tree-budget"}
    suggestions = suggest_flags(HELP, unknown)
    assert suggestions == {
        "--speculative-dflash-draft-window-size": "--speculative-draft-window-size",
        "--enable-metric": "--enable-metrics",
    }
    assert flag_problem(unknown, suggestions) == (
        "unknown to this build: --enable-metric (did you mean --enable-metrics?), "
        "--speculative-dflash-draft-window-size (did you mean --speculative-draft-window-size?), "
        "--tree-budget"
    )


def test_parse_batches_ask_each_distinct_argv_once_per_environment_within_the_size() -> None:
    """One process per interpreter and environment, cut only where one command line could not
    hold the argvs (the remote shell's -c argument is capped at 128 KiB)."""
    plain, other_env = ("env", "/py"), ("env", "A=1", "/py")
    commands = [
        ParseCommand(plain, ("--a", "1")),
        ParseCommand(plain, ("--a", "2")),
        ParseCommand(plain, ("--a", "1")),  # the same argv again (a repeat): asked once
        ParseCommand(other_env, ("--a", "1")),
    ]
    assert parse_batches(commands) == [
        ParseBatch(plain, (("--a", "1"), ("--a", "2"))),
        ParseBatch(other_env, (("--a", "1"),)),
    ]
    many = [ParseCommand(plain, ("--a", str(n))) for n in range(10)]
    cut = parse_batches(many, max_chars=40)  # each argv ~15 characters with its quoting
    assert [len(batch.argvs) for batch in cut] == [2, 2, 2, 2, 2]
    assert [argv for batch in cut for argv in batch.argvs] == [c.argv for c in many]


def test_a_repeat_or_a_search_proposal_finds_its_configs_verdict() -> None:
    """The preflight parses each config once, under its first key; the runner asks with the
    key of whichever measurement it runs."""
    key = trial_key("h1", "sglang.service", {"algorithm": "FOO"})
    verdict = ParseVerdict(False, "resolution", "ValueError: Unknown speculative algorithm")
    check = HostCheck("h1", (), rejected={key: verdict})
    assert check.refusal(key) is verdict
    assert check.refusal(repeat_key(key, 3)) is verdict
    assert check.refusal(trial_key("h1", "sglang.service", {"algorithm": "NGRAM"})) is None
    assert first_key(repeat_key(key, 12)) == key == first_key(key)


def test_space_trials_are_every_config_of_configs_and_grid_whatever_the_cap() -> None:
    sweep = parse_sweep(
        "name: s\nhosts:\n  - {name: h1, address: 10.0.0.1, base_url: 'http://10.0.0.1:1'}\n"
        "server:\n  model: m\n  knobs: {a: {flag: --a}, b: {flag: --b}}\n"
        "baseline: true\nconfigs: [{a: 9}]\ngrid: {a: [1, 2], b: [1, 2, 3]}\n"
        "search: {strategy: adaptive, max_restarts: 2}\n"
    )
    assert len(plan_sweep(sweep)) == 2
    trials = space_trials(sweep, "h1")
    assert [config for _, config in trials] == expand_configs(sweep)
    assert len(trials) == 1 + 1 + 6
    assert trials[1][0] == trial_key("h1", sweep.unit, {"a": 9})
