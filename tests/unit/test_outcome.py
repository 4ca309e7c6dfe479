"""How a foreground sweep's end reads: each attempt's outcome, a failure in plain words with
the evidence that names it, and the best config measured."""

from __future__ import annotations

from typing import Any, get_args

from orchestrator.causes import CAUSE_WORDS
from orchestrator.types import FailureCause
from orchestrator.verbs.outcome import best_config, failure_words, outcome_lines


def _attempt(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "key": "k",
        "host": "sim-01",
        "config": {},
        "state": "done",
        "cause": None,
        "evidence": None,
        "attempt": 1,
        "points": [],
    }
    return {**base, **fields}


def test_outcome_says_each_failure_in_plain_words_and_the_best_config() -> None:
    results = {
        "sweep": "demo",
        "id": 3,
        "state": "done",
        "trials": [
            _attempt(
                config={"budget": 16, "topk": 4},
                points=[
                    {"kind": "throughput", "context": 60, "concurrency": 4,
                     "metrics": {"output_tok_s": 5408.2}},
                    {"kind": "coding", "metrics": {"outcome": "pass"}},
                    {"kind": "coding", "metrics": {"outcome": "fail"}},
                ],
            ),
            _attempt(
                config={"budget": 8, "topk": 4, "legacy_window": 2048},
                state="failed",
                cause="bad-flag",
                evidence={"found_by": "preflight",
                          "unknown_flags": ["--speculative-dflash-draft-window-size"]},
            ),
            _attempt(
                config={"algorithm": "DFLASH", "block_size": 16, "window": 8},
                state="failed",
                cause="invalid-config",
                attempt=2,
                evidence={"message": "raise ValueError(", "excerpt": [
                    "Traceback (most recent call last):",
                    "ValueError: speculative_draft_window_size=8 must be >= the block size (16)",
                    "sglang.service: Main process exited, code=exited, status=1/FAILURE",
                ]},
            ),
        ],
    }
    lines = outcome_lines(results, note=lambda t: "as intended" if t["cause"] else None)
    text = "\n".join(lines)
    assert lines[0] == "sweep demo (id 3): done" and len(lines) == 4
    assert "sweep demo (id 3): done" in text
    assert "coding 1/2 pass" in text and "up to 5,408 tok/s" in text
    assert "FAILED: bad-flag (as intended)" in text
    assert "does not know a flag: --speculative-dflash-draft-window-size" in text
    assert "found by the preflight" in text
    assert "FAILED: invalid-config" in text and "(attempt 2)" in text
    assert "ValueError: speculative_draft_window_size=8 must be >= the block size" in text
    assert best_config(results) == "budget=16 topk=4 @sim-01: 5,408 tok/s (ctx 60, c=4)"


def test_a_schedule_trial_is_named_as_the_schedule_not_as_its_fixed_settings() -> None:
    """A schedule trial's config is the schedule's fixed settings (vLLM's largest draft
    length): under that name it would read as one more run of the fixed config."""
    fixed = {"method": "eagle3", "tokens": 7}
    points = [{"kind": "throughput", "context": 1024, "concurrency": 32,
               "metrics": {"output_tok_s": 4440.0}}]  # fmt: skip
    results = {"sweep": "demo-vllm", "id": 1, "state": "done", "trials": [
        _attempt(config={"method": "eagle3", "tokens": 2}),
        _attempt(config=fixed),
        _attempt(config=fixed, plan={"purpose": "schedule"}, points=points),
    ]}  # fmt: skip
    lines = outcome_lines(results)
    assert "tokens=7" in lines[2] and "schedule" not in lines[2]
    assert "schedule (across load)" in lines[3] and "tokens=7" not in lines[3], lines
    assert best_config(results) == (
        "schedule (across load) @sim-01: 4,440 tok/s (ctx 1024, c=32)"
    )


def test_every_failure_cause_has_plain_words() -> None:
    assert set(get_args(FailureCause)) <= set(CAUSE_WORDS)


def test_failure_words_fall_back_to_the_message() -> None:
    words = failure_words("memory-not-released", {"message": "GPU 0 still holds 8000 MiB"})
    assert words == (
        "GPU memory stayed in use after the stop; the unit was not started: "
        "GPU 0 still holds 8000 MiB"
    )
    assert failure_words(None, None) == "it failed"
    # the evidence is shown as it is
    results = {"sweep": "s", "id": 1, "state": "done", "trials": [
        _attempt(state="failed", cause="exited", evidence={"message": "[red]boom[/red] [N]"})
    ]}
    assert outcome_lines(results)[1].endswith("FAILED: exited: the server exited at startup: "
                                              "[red]boom[/red] [N]")


def test_failure_words_name_the_line_the_engine_classified() -> None:
    """vLLM's engine core logs the root cause, then the API server's own RuntimeError line
    follows it: the words show the line the cause was read from, not the last error line."""
    root = (
        "ValueError: max_num_scheduled_tokens is set to 0 based on the speculative decoding "
        "settings, which does not allow any tokens to be scheduled."
    )
    evidence = {
        "message": root,
        "excerpt": [
            "(EngineCore pid=7) ERROR 12-03 15:12:12 [core.py:1584] EngineCore failed to start.",
            f"(EngineCore pid=7) ERROR 12-03 15:12:12 [core.py:1584] {root}",
            "RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore': 1}",
            "vllm.service: Main process exited, code=exited, status=1/FAILURE",
        ],
    }
    words = failure_words("invalid-config", evidence)
    assert words.endswith(f": {root}") and "RuntimeError" not in words
