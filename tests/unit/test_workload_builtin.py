"""The built-in workloads: offline, deterministic, at least 200 distinct realistic prompts each,
and code contexts past 32k tokens (counted by the simulated server's tokenizer)."""

from __future__ import annotations

import pytest

from orchestrator.bench.workloads import BUILTIN_WORKLOADS, load_builtin
from orchestrator.sim.tokenizer import count_tokens


@pytest.mark.parametrize("name", BUILTIN_WORKLOADS)
def test_each_builtin_set_has_200_distinct_prompts_ending_in_a_user_turn(name: str) -> None:
    sample = load_builtin(name)
    assert sample.label == f"builtin:{name}"
    assert len({r.messages for r in sample.requests}) >= 200
    assert all(r.messages[-1].role == "user" for r in sample.requests)
    assert [r.line for r in sample.requests] == list(range(1, len(sample.requests) + 1))
    assert load_builtin(name).content_hash == sample.content_hash  # deterministic


def test_code_context_reaches_32k_tokens_and_asks_about_the_code() -> None:
    sample = load_builtin("code-context")
    longest = max(sample.requests, key=lambda r: len(r.messages[-1].content))
    assert count_tokens(longest.messages[-1].content) >= 32768
    content = longest.messages[-1].content
    question, _, code = content.partition("\n\nThis is `")
    assert question.endswith((".", "?")) and "```python\n" in code
    named = question.split("`")[1] if "`" in question else ""
    assert not named or named in code  # the question names something the module defines


def test_chat_is_multi_turn_and_an_unknown_name_is_refused() -> None:
    turns = [len(r.messages) for r in load_builtin("chat").requests]
    assert min(turns) >= 3 and max(turns) >= 5
    with pytest.raises(ValueError, match="no built-in workload 'nope'"):
        load_builtin("nope")
