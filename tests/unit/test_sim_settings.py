"""Simulated server settings, tokenizer and thinking model: the pure parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.sim.settings import ServerSimSettings, SimSettingsError
from orchestrator.sim.thinking import (
    ParserKind,
    ReasoningSplitter,
    coding_answer_is_wrong,
    find_entry_point,
    plan_completion,
)
from orchestrator.sim.tokenizer import chat_prompt_tokens, tokenize


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "sim.json"
    path.write_text(json.dumps(data))
    return path


def test_defaults_without_a_file() -> None:
    s = ServerSimSettings.from_env({})
    assert (s.time_scale, s.sglang_version, s.ddtree, s.load_s) == (1.0, "0.5.23", True, 3.0)
    assert (s.gpu_count, s.gpu_total_mib, s.weights_mib_per_gpu) == (8, 97887, 80000)
    assert s.faults.crash_at_start.active([]) is None


def test_faults_plain_and_with_when_args(tmp_path: Path) -> None:
    path = write(tmp_path, {
        "time_scale": 0.5, "perf": {"step_base_ms": 20},
        "faults": {"crash_at_start": {"value": "oom", "when_args": ["--tp", "8"]},
                   "hang_request_every": 3, "when_args": ["DFLASH"]},
    })
    s = ServerSimSettings.load(path)
    assert s.scaled(2.0) == 1.0 and s.perf.step_base_ms == 20.0
    assert s.faults.crash_at_start.active(["--tp", "8"]) == "oom"
    assert s.faults.crash_at_start.active(["--tp", "4"]) is None
    assert s.faults.hang_request_every.active(["x", "DFLASH"]) == 3
    assert s.faults.hang_request_every.active(["x"]) is None


@pytest.mark.parametrize("bad", [
    {"time_scale": "fast"}, {"nope": 1}, {"faults": {"crash_at_start": "meteor"}},
    {"faults": {"ignore_sigterm": 1}}, {"perf": {"warp": 9}}, {"time_scale": 0},
])
def test_bad_settings_name_the_problem(tmp_path: Path, bad: dict[str, object]) -> None:
    with pytest.raises(SimSettingsError) as info:
        ServerSimSettings.load(write(tmp_path, bad))
    assert str(tmp_path) in str(info.value)


def test_tokenizer_round_trips_and_isolates_markers() -> None:
    text = "<think>\nx = f(1)\n</think>\n\nHello,  world!\n"
    tokens = tokenize(text)
    assert "".join(tokens) == text
    assert "<think>" in tokens and "</think>" in tokens
    assert tokenize("a b") == ["a", " b"]
    assert len(chat_prompt_tokens([("user", "a b")])) == 2 + 4 + 3


def test_coding_prompt_gets_drafts_in_reasoning_then_final_code() -> None:
    prompt = "Write a Python function `fib(n)` returning the n-th Fibonacci number."
    assert find_entry_point(prompt) == "fib"
    assert find_entry_point("Tell me a story.") is None
    plan = plan_completion(prompt, max_new_tokens=5000, ignore_eos=False, seed=0, wrong_rate=0)
    assert plan.finish == "stop"
    reasoning, content = ReasoningSplitter(ParserKind.THINK_TAGS).feed(plan.tokens)
    assert reasoning.count("```python") >= 2 and content.count("```python") == 1
    code = content.split("```python\n")[1].split("```")[0]
    namespace: dict[str, object] = {}
    exec(code, namespace)  # the reference solution is correct
    fib = namespace["fib"]
    assert callable(fib) and [fib(i) for i in range(7)] == [0, 1, 1, 2, 3, 5, 8]
    raw, whole = ReasoningSplitter(ParserKind.NONE).feed(plan.tokens)
    assert raw == "" and whole.startswith("<think>") and "</think>" in whole


def test_wrong_rate_is_seeded_and_roughly_honoured() -> None:
    prompts = [f"Write a Python function `gcd` variant {i}" for i in range(400)]
    wrong = [coding_answer_is_wrong(p, 0, 0.15) for p in prompts]
    assert wrong == [coding_answer_is_wrong(p, 0, 0.15) for p in prompts]
    assert 0.08 <= sum(wrong) / len(wrong) <= 0.22


def test_ignore_eos_and_truncation_lengths() -> None:
    plan = plan_completion("hi", max_new_tokens=777, ignore_eos=True, seed=1, wrong_rate=0)
    assert len(plan.tokens) == 777 and plan.finish == "length"
    cut = plan_completion("Write a Python function `gcd`", max_new_tokens=10,
                          ignore_eos=False, seed=1, wrong_rate=0)
    reasoning, content = ReasoningSplitter(ParserKind.THINK_TAGS).feed(cut.tokens)
    assert cut.finish == "length" and content == "" and reasoning
