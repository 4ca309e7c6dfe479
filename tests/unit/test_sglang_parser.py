"""Preflight by SGLang's own parser: the script the host's Python runs, the command that runs it
with the unit's interpreter, environment and working directory, and how its answer is read; the
simulated host's SGLang answers the same way from the simulated server's parser."""

from __future__ import annotations

import json
import subprocess
import sys

from orchestrator.host.dropin import TrialInvocation
from orchestrator.sglang_parser import (
    MARKER,
    PARSE_SCRIPT,
    ParserUnavailable,
    ParseVerdict,
    parse_command,
    read_answer,
)
from orchestrator.sim import parse_check

PY = "/opt/sglang/.venv/bin/python"
ARGV = (PY, "-m", "sglang.launch_server", "--model-path", "/m", "--speculative-algorithm", "X")

# prepare_server_args as SGLang defines it (an argparse parser, prog "sglang serve", then
# resolution), put in place in memory only: nothing named sglang exists on disk here.
_STUB = """\
import argparse, sys, types
def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--speculative-num-draft-tokens", type=int)
    parser.add_argument("--speculative-draft-window-size", type=int)
    parser.add_argument("--speculative-dflash-draft-window-size", type=int,
                        dest="speculative_draft_window_size", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
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


def _run_script(*argv: str, stub: bool = True) -> ParseVerdict | ParserUnavailable:
    code = (_STUB if stub else "") + PARSE_SCRIPT
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return read_answer(done.stdout)


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
    assert command == [
        "env", "-C", "/srv/sglang", "-u", "SGLANG_DDTREE_MAX_TOPK", "A=x y", "B=2",
        PY, "-c", PARSE_SCRIPT, "--model-path", "/m", "--speculative-algorithm", "X",
    ]  # fmt: skip
    assert parse_command(ARGV, TrialInvocation(argv=ARGV), None)[:2] == ["env", PY]  # type: ignore[index]
    wrapper = ("/usr/local/bin/sglang-serve", "--model-path", "/m")
    assert parse_command(wrapper, TrialInvocation(argv=wrapper), None) is None


def test_an_answer_without_the_marker_line_is_unavailable() -> None:
    missing = read_answer("", "env: '/opt/venv/bin/python': No such file or directory\n")
    assert isinstance(missing, ParserUnavailable) and "No such file" in missing.reason
    assert isinstance(read_answer(MARKER + "{not json\n"), ParserUnavailable)
    noisy = "warning: x\n" + MARKER + json.dumps({"ok": None, "kind": "unchecked"}) + "\n"
    assert read_answer(noisy) == ParseVerdict(ok=None, kind="unchecked")


def test_the_simulated_sglang_answers_as_the_script_does(tmp_path: object) -> None:
    assert parse_check.MARKER == MARKER and parse_check.SGLANG_IMPORT in PARSE_SCRIPT
    assert parse_check.is_parse_script(["-c", PARSE_SCRIPT, "--x"])
    assert not parse_check.is_parse_script(["-c", "print(1)"])
    env: dict[str, str] = {}  # the simulated 0.5.23 build's defaults
    unknown = read_answer(parse_check.answer(
        ["--model-path", "/m", "--speculative-dflash-draft-window-size", "8"], env
    ))  # fmt: skip
    assert unknown == ParseVerdict(
        False,
        "argparse",
        "launch_server.py: error: unrecognized arguments: "
        "--speculative-dflash-draft-window-size 8",
    )
    refused = read_answer(parse_check.answer(
        ["--model-path", "/m", "--speculative-algorithm", "DFLASH",
         "--speculative-draft-model-path", "/d", "--speculative-num-draft-tokens", "16",
         "--speculative-draft-window-size", "8"], env,
    ))  # fmt: skip
    assert isinstance(refused, ParseVerdict) and refused.cause == "invalid-config"
    assert (refused.error or "").startswith("ValueError: ")
    fine = read_answer(parse_check.answer(
        ["--model-path", "/m", "--speculative-algorithm", "ngram"], env
    ))  # fmt: skip
    assert isinstance(fine, ParseVerdict) and fine.ok is True
    assert fine.speculative["speculative_algorithm"] == "NGRAM"
