"""Preflight by SGLang's own parser: the script the host's Python runs, the command that runs it
with the unit's interpreter, environment and working directory, and how its answer is read; the
simulated host's SGLang answers the same way from the simulated server's parser."""

from __future__ import annotations

import json
import subprocess
import sys

from orchestrator.engines.base import ParseCommand, ParserUnavailable, ParseVerdict
from orchestrator.engines.sglang.argv import (
    MARKER,
    PARSE_SCRIPT,
    batch_command,
    parse_command,
    read_answers,
)
from orchestrator.host.dropin import TrialInvocation
from orchestrator.sim import parse_check

PY = "/opt/sglang/.venv/bin/python"
ARGV = (PY, "-m", "sglang.launch_server", "--model-path", "/m", "--speculative-algorithm", "X")

# prepare_server_args as SGLang defines it (an argparse parser, prog "sglang serve", then
# resolution), put in place in memory only: nothing named sglang exists on disk here.
_STUB = """\
import argparse, os, sys, types
def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--speculative-num-draft-tokens", type=int)
    parser.add_argument("--speculative-draft-window-size", type=int)
    parser.add_argument("--speculative-dflash-draft-window-size", type=int,
                        dest="speculative_draft_window_size", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if os.environ.get("STUB_RESOLVED"):  # resolution leaves state behind, as SGLang's may
        raise ValueError("an earlier argv's resolution leaked into this one")
    os.environ["STUB_RESOLVED"] = "1"
    block, window = args.speculative_num_draft_tokens, args.speculative_draft_window_size
    if window is not None and block is not None and window < block:
        raise ValueError(f"draft window {window} < block size {block}")
    assert args.model_path != "", "model_path must not be empty"
    return args
module = types.ModuleType("sglang.srt.server_args")
module.prepare_server_args = prepare_server_args
for name in ("sglang", "sglang.srt"):
    sys.modules[name] = types.ModuleType(name)
sys.modules["sglang.srt.server_args"] = module
"""


def _run_batch(
    *argvs: tuple[str, ...], stub: bool = True
) -> list[ParseVerdict] | ParserUnavailable:
    """One process of the script, as the preflight runs it, asked every argv of ``argvs``."""
    command = batch_command([sys.executable], argvs)
    assert command[1:3] == ["-c", PARSE_SCRIPT]
    command[2] = (_STUB if stub else "") + PARSE_SCRIPT
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return read_answers(done.stdout, done.stderr, len(argvs))


def _run_script(*argv: str, stub: bool = True) -> ParseVerdict | ParserUnavailable:
    answers = _run_batch(argv, stub=stub)
    return answers if isinstance(answers, ParserUnavailable) else answers[0]


def test_the_script_reports_a_missing_sglang_as_unavailable() -> None:
    answer = _run_script("--model-path", "/m", stub=False)
    assert isinstance(answer, ParserUnavailable)
    assert "No module named 'sglang'" in answer.reason
    assert "from sglang.srt.server_args import prepare_server_args failed" in answer.reason


def test_the_script_accepts_a_hidden_alias_that_help_does_not_show() -> None:
    answer = _run_script("--model-path", "/m", "--speculative-dflash-draft-window-size", "64")
    assert answer == ParseVerdict(
        ok=True,
        speculative={"speculative_draft_window_size": 64, "speculative_num_draft_tokens": None},
    )


def test_the_script_reports_argparse_and_resolution_errors() -> None:
    unknown = _run_script("--model-path", "/m", "--speculative-window", "8")
    assert isinstance(unknown, ParseVerdict) and unknown.cause == "bad-flag"
    assert unknown.error == "sglang serve: error: unrecognized arguments: --speculative-window 8"
    assert unknown.unknown_flags == ("--speculative-window",)
    bad_value = _run_script("--model-path", "/m", "--speculative-num-draft-tokens", "x")
    assert isinstance(bad_value, ParseVerdict) and bad_value.cause == "bad-flag"
    assert bad_value.unknown_flags == ()
    assert "argument --speculative-num-draft-tokens: invalid int value: 'x'" in (
        bad_value.error or ""
    )
    window = _run_script(
        "--model-path", "/m", "--speculative-num-draft-tokens", "16",
        "--speculative-draft-window-size", "8",
    )  # fmt: skip
    assert window == ParseVerdict(False, "resolution", "ValueError: draft window 8 < block size 16")
    assert window.cause == "invalid-config"
    empty = _run_script("--model-path", "")
    assert isinstance(empty, ParseVerdict) and empty.cause == "invalid-config"
    assert empty.error == "AssertionError: model_path must not be empty"


def test_the_command_runs_the_units_interpreter_with_its_environment() -> None:
    invocation = TrialInvocation(
        argv=ARGV, environment={"B": "2", "A": "x y"}, unset_environment=("SGLANG_DDTREE_MAX_TOPK",)
    )
    command = parse_command(ARGV, invocation, "/srv/sglang")
    assert command == ParseCommand(
        ("env", "-C", "/srv/sglang", "-u", "SGLANG_DDTREE_MAX_TOPK", "A=x y", "B=2", PY),
        ("--model-path", "/m", "--speculative-algorithm", "X"),
    )  # fmt: skip
    plain = parse_command(ARGV, TrialInvocation(argv=ARGV), None)
    assert plain is not None and plain.prefix == ("env", PY)
    assert batch_command(plain.prefix, [plain.argv, ("--model-path", "/n")]) == [
        "env", PY, "-c", PARSE_SCRIPT,
        '["--model-path", "/m", "--speculative-algorithm", "X"]', '["--model-path", "/n"]',
    ]  # fmt: skip
    wrapper = ("/usr/local/bin/sglang-serve", "--model-path", "/m")
    assert parse_command(wrapper, TrialInvocation(argv=wrapper), None) is None


def test_an_answer_without_the_marker_line_is_unavailable() -> None:
    missing = read_answers("", "env: '/opt/venv/bin/python': No such file or directory\n", 1)
    assert isinstance(missing, ParserUnavailable) and "No such file" in missing.reason
    assert isinstance(read_answers(MARKER + "{not json\n", "", 1), ParserUnavailable)
    line = MARKER + json.dumps({"index": 0, "ok": None, "kind": "unchecked"}) + "\n"
    assert read_answers("warning: x\n" + line, "", 1) == [ParseVerdict(ok=None, kind="unchecked")]


def test_one_process_answers_a_batch_in_order_each_argv_from_the_same_environment() -> None:
    """The whole space is one import of SGLang, and one argv's resolution (which may set
    environment variables) never decides the next one's verdict."""
    answers = _run_batch(
        ("--model-path", "/m", "--speculative-window", "8"),
        ("--model-path", "/m", "--speculative-num-draft-tokens", "4"),
        ("--model-path", "/m", "--speculative-num-draft-tokens", "5"),
    )
    assert isinstance(answers, list) and len(answers) == 3
    assert answers[0].unknown_flags == ("--speculative-window",)
    assert [a.ok for a in answers[1:]] == [True, True]
    assert answers[2].speculative["speculative_num_draft_tokens"] == 5


def test_an_argv_the_batch_never_answered_goes_unchecked() -> None:
    """A script that died on the way (killed, out of memory) leaves its later argvs without a
    verdict: they run, not fail."""
    first = MARKER + json.dumps({"index": 0, "ok": False, "kind": "argparse", "error": "x"})
    answers = read_answers(first + "\n", "Killed\n", 2)
    assert isinstance(answers, list)
    assert answers[0] == ParseVerdict(False, "argparse", "x")
    assert answers[1] == ParseVerdict(None, "unchecked", "no answer from the parse script: Killed")


def test_the_simulated_sglang_answers_as_the_script_does(tmp_path: object) -> None:
    assert parse_check.MARKER == MARKER and parse_check.SGLANG_IMPORT in PARSE_SCRIPT
    assert parse_check.is_parse_script(["-c", PARSE_SCRIPT, "--x"])
    assert not parse_check.is_parse_script(["-c", "print(1)"])
    env: dict[str, str] = {}  # the simulated 0.5.23 build's defaults

    def ask(*argv: str) -> ParseVerdict:
        answers = read_answers(parse_check.answer([json.dumps(list(argv))], env), "", 1)
        assert isinstance(answers, list)
        return answers[0]

    unknown = ask("--model-path", "/m", "--speculative-dflash-draft-window-size", "8")
    assert unknown == ParseVerdict(
        False,
        "argparse",
        "launch_server.py: error: unrecognized arguments: "
        "--speculative-dflash-draft-window-size 8",
    )
    refused = ask(
        "--model-path", "/m", "--speculative-algorithm", "DFLASH",
        "--speculative-draft-model-path", "/d", "--speculative-num-draft-tokens", "16",
        "--speculative-draft-window-size", "8",
    )  # fmt: skip
    assert refused.cause == "invalid-config"
    assert (refused.error or "").startswith("ValueError: ")
    fine = ask("--model-path", "/m", "--speculative-algorithm", "ngram")
    assert fine.ok is True
    assert fine.speculative["speculative_algorithm"] == "NGRAM"
