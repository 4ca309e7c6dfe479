"""llama.cpp's ``llama-server`` as an engine, on what the real server said.

Every input here was captured from the ``llama-server`` that ``make real-engine`` builds
(llama.cpp as vendored by llama-cpp-python 0.3.36): its journal lines, a streamed chat answer
with ``timings_per_token``, its ``/props`` and ``/slots`` (tests/data/llamacpp/). The
real-engine tier (tests/realengine) runs the same engine against the live server.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.engines.base import (
    DecodeEvent,
    Engine,
    FailureEvent,
    Generation,
    InitEvent,
    KnobResolution,
    ProvenanceSources,
    ReadyEvent,
    TokenSource,
)
from orchestrator.engines.llamacpp import argv as llama_argv
from orchestrator.engines.llamacpp import config
from orchestrator.host.dropin import TrialInvocation

DATA = Path(__file__).resolve().parents[1] / "data" / "llamacpp"
LINES = (DATA / "journal-lines.txt").read_text().splitlines()


@pytest.fixture
def engine() -> Engine:
    return engines.get("llamacpp")


def _line(fragment: str) -> str:
    return next(line for line in LINES if fragment in line)


def test_registered_by_name(engine: Engine) -> None:
    assert "llamacpp" in engines.names()
    assert engine.name == "llamacpp" and engine.default_unit == "llama-server.service"
    assert engine.metrics_flags("auto") == ("--metrics",) and engine.metrics_flags("off") == ()
    assert engine.apis == frozenset({"chat"})


def test_log_lines(engine: Engine) -> None:
    acceptance = engine.parse_log_line(_line("draft acceptance"))
    assert isinstance(acceptance, DecodeEvent)
    assert acceptance.accept_len == 1.83 and acceptance.accept_rate == pytest.approx(5 / 22)
    assert acceptance.fields["accepted"] == 5 and acceptance.fields["task"] == 0
    assert isinstance(engine.parse_log_line(_line("model loaded")), ReadyEvent)
    draft = engine.parse_log_line(_line("loading draft model '/models"))
    assert isinstance(draft, InitEvent) and draft.kind == "draft_model"
    assert draft.fields["path"] == "/models/tiny-llama-g1-h1024-l8-s0.08-seed0-draft1.gguf"
    slots = engine.parse_log_line(_line("n_slots ="))
    assert isinstance(slots, InitEvent) and slots.fields == {"n_slots": 1, "n_ctx_slot": 2048}
    # The last line of every failed start says only that it failed: the cause is earlier.
    assert engine.parse_log_line(_line("exiting due to model loading error")) is None


@pytest.mark.parametrize(
    ("fragment", "cause"),
    [
        ("failed to load draft model", "invalid-config"),
        ("failed to open GGUF file", "invalid-config"),
        ("invalid magic characters", "invalid-config"),
        ("couldn't bind HTTP server socket", "port-in-use"),
        ('handling argument "--draft-max"', "bad-flag"),
        ("invalid argument: --foo", "bad-flag"),
    ],
)
def test_failure_texts(engine: Engine, fragment: str, cause: str) -> None:
    event = engine.parse_log_line(_line(fragment))
    assert isinstance(event, FailureEvent) and event.cause == cause, event


def test_stream_tokens_come_from_timings(engine: Engine) -> None:
    """A token whose bytes end inside a UTF-8 character sends no chunk: the chunk after it
    carries two tokens, which only ``timings.predicted_n`` says."""
    events = [
        (float(i), line.removeprefix("data: "))
        for i, line in enumerate((DATA / "chat-stream-timings.sse").read_text().splitlines())
        if line.startswith("data: ")
    ]
    parsed = engine.dialect("chat").parse_stream(events)
    assert parsed.error is None, parsed.error_detail
    assert parsed.token_source is TokenSource.CUMULATIVE_PER_CHUNK
    assert parsed.completion_tokens == 12 == sum(c.tokens for c in parsed.chunks)
    assert max(c.tokens for c in parsed.chunks) == 2  # 8 -> 10 in one chunk
    assert (parsed.spec_proposed_drafts, parsed.spec_correct_drafts) == (22, 5)
    wire = engine.dialect("chat").request(Generation("hi", 8, 0.0, stream=True, model="tiny"))
    assert wire.body["timings_per_token"] is True and wire.body["stream_options"]
    final = {"choices": [{"message": {"content": "x"}}], "timings": {"predicted_n": 7}}
    assert engine.dialect("chat").parse_final(final).completion_tokens == 7


def test_running_config(engine: Engine) -> None:
    captured = json.loads((DATA / "props-slots.json").read_text())
    info = {**captured["props"], "speculative": all(s["speculative"] for s in captured["slots"])}
    knobs = [
        engine.resolve_flag_knob("spec", "--spec-type", "draft-simple"),
        engine.resolve_flag_knob("draft", "--spec-draft-model", "/models/d.gguf"),
        engine.resolve_flag_knob("n_max", "--spec-draft-n-max", 4),
        engine.resolve_flag_knob("slots", "--parallel", 1),
    ]
    assert knobs[2].server_info_keys == ()  # reported nowhere over HTTP
    assert engine.check_server_config(info, knobs).ok
    off = {**info, "speculative": False}
    check = engine.check_server_config(off, knobs)
    assert [d.knob for d in check.mismatches] == ["spec"], check
    none = [KnobResolution("spec", "--spec-type", "none", ("speculative",))]
    assert engine.check_server_config(off, none).ok
    two = engine.check_server_config(info, [engine.resolve_flag_knob("s", "--parallel", 2)])
    assert [(d.expected, d.actual) for d in two.mismatches] == [(2, 1)]
    provenance = engine.build_provenance(ProvenanceSources(info, exec_start=("llama-server",)))
    assert provenance.engine_version == "b1-0c1e570"
    assert provenance.model_path == "/models/tiny-llama-g1-h1024-l8-s0.08-seed0.gguf"


def test_words_forcing_and_served_model(engine: Engine) -> None:
    assert engine.normal_word("8.0", "--spec-draft-n-max") == "8"
    assert engine.normal_word("draft-simple, ngram-mod", "--spec-type") == "draft-simple,ngram-mod"
    assert "--spec-draft-n-max" in engine.forced_flags({})
    assert "--spec-draft-n-max" in engine.forced_flags({"--spec-type": "none"})
    draft = engine.forced_flags({"--spec-type": "draft-simple"})
    assert "--spec-draft-n-max" not in draft and "--spec-ngram-simple-size-n" in draft
    ngram = engine.forced_flags({"--spec-type": "ngram-simple"})
    assert "--spec-draft-n-max" in ngram and "--spec-ngram-simple-size-n" not in ngram
    served = engine.served_model(["llama-server", "--model", "/m/t.gguf", "--alias", "a,b"])
    assert served is not None and (served.name, served.flag) == ("a", "--alias")
    served = config.served_model(["llama-server", "--model", "/m/t.gguf"])
    assert served is not None and served.name == "t.gguf"


def test_parser_script_runs_the_program_once_per_argv(tmp_path: Path) -> None:
    """The preflight's batch, run for real through ``sh`` with a stand-in program that
    answers as llama-server does (``--help`` after a good argv: exit 0; a refused flag: its
    error line on stderr, exit 1). The real binary is asked in tests/realengine."""
    program = tmp_path / "llama-server"
    program.write_text(
        "#!/bin/sh\nfor a in \"$@\"; do case $a in --draft-max) echo "
        "'error while handling argument \"--draft-max\": the argument has been removed.' >&2;"
        " echo >&2; echo usage: >&2; exit 1;; esac; done\necho usage\nexit 0\n"
    )
    program.chmod(0o755)
    invocation = TrialInvocation(
        argv=(str(program), "--model", "/m/a b.gguf", "--spec-draft-n-max", "4"),
        environment={"LLAMA_ARG_X": "1"},
    )
    command = llama_argv.parse_command((str(program),), invocation, str(tmp_path))
    assert command is not None
    assert command.argv == ("--model", "/m/a b.gguf", "--spec-draft-n-max", "4")
    argvs = [command.argv, ("--draft-max", "8"), ("--model", "it's")]
    done = subprocess.run(
        llama_argv.batch_command(command.prefix, argvs), capture_output=True, text=True, timeout=30
    )
    verdicts = llama_argv.read_answers(done.stdout, done.stderr, len(argvs))
    assert isinstance(verdicts, list), verdicts
    assert [v.ok for v in verdicts] == [True, False, True]
    assert verdicts[1].cause == "bad-flag" and "has been removed" in (verdicts[1].error or "")
    missing = llama_argv.batch_command(("env", str(tmp_path / "absent")), argvs[:1])
    done = subprocess.run(missing, capture_output=True, text=True, timeout=30)
    unavailable = llama_argv.read_answers(done.stdout, done.stderr, 1)
    assert not isinstance(unavailable, list) and "cannot be run" in unavailable.reason
    assert llama_argv.parse_command(("python3",), TrialInvocation(argv=("python3",)), None) is None
