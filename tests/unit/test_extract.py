"""Final-answer code extraction: the seeds' bug and the shapes real thinking models produce."""

from __future__ import annotations

import pytest

from orchestrator.bench.coding import (
    AnswerKind,
    classify_answer,
    extract_final_code,
    find_code_blocks,
    split_reasoning,
)

DRAFT = "def word_count(text):\n    counts = {}\n    for word in text.split(' ')\n"
FINAL = (
    "def word_count(text: str) -> dict:\n"
    "    counts: dict = {}\n"
    "    for word in text.lower().split():\n"
    "        counts[word] = counts.get(word, 0) + 1\n"
    "    return counts"
)
USAGE = 'print(word_count("a b a"))'


def thinking_output(open_tag: str = "<think>", close_tag: str = "</think>") -> str:
    return (
        f"{open_tag}\nThe user wants `word_count`. A first attempt:\n\n"
        f"```python\n{DRAFT}```\n\nWait, the for statement is missing its colon.\n\n"
        f"```python\n{FINAL.replace('counts', 'c')}\n```\nLooks right.\n{close_tag}\n\n"
        f"Here is the implementation:\n\n```python\n{FINAL}\n```\n\nIt splits on whitespace."
    )


def test_seed_bug_first_block_is_a_broken_draft() -> None:
    output = thinking_output()
    assert find_code_blocks(output)[0].code.startswith("def word_count(text):\n    counts = {}")
    assert extract_final_code(output, entry_point="word_count") == FINAL
    assert extract_final_code(output) == FINAL


def test_missing_opening_tag_r1_style() -> None:
    output = thinking_output(open_tag="")
    assert extract_final_code(output, entry_point="word_count") == FINAL


def test_kimi_triangle_markers() -> None:
    output = thinking_output("◁think▷", "◁/think▷")
    assert extract_final_code(output, entry_point="word_count") == FINAL


def test_tag_case_and_spacing_variations() -> None:
    output = thinking_output("<THINK>", "</ Think >")
    assert extract_final_code(output, entry_point="word_count") == FINAL


def test_reasoning_in_its_own_field() -> None:
    reasoning = f"Draft:\n```python\n{DRAFT}```\nfixed."
    content = f"Final:\n```python\n{FINAL}\n```"
    assert extract_final_code(content, reasoning, "word_count") == FINAL
    # The draft in the reasoning field is never taken, even when the answer has no code.
    assert extract_final_code("I could not solve it.", reasoning, "word_count") is None


def test_trailing_usage_block_is_skipped_for_the_defining_block() -> None:
    content = (
        f"</think>Solution:\n```python\n{FINAL}\n```\nUsage:\n```python\n{USAGE}\n```\n"
        "Output:\n```\n{'a': 2, 'b': 1}\n```"
    )
    assert extract_final_code(content, entry_point="word_count") == FINAL
    # Without an entry point the last Python-looking block is the answer.
    assert extract_final_code(content) == "{'a': 2, 'b': 1}"


def test_last_defining_block_wins_among_several() -> None:
    first = "def gcd(a, b):\n    return a"
    second = "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return abs(a)"
    content = f"```python\n{first}\n```\nBetter:\n```py\n{second}\n```\n```python\n{USAGE}\n```"
    assert extract_final_code(content, entry_point="gcd") == second


def test_no_block_defines_entry_point_takes_the_last_block() -> None:
    content = "```python\nx = 1\n```\n```python\ny = 2\n```"
    assert extract_final_code(content, entry_point="fib") == "y = 2"


def test_non_python_language_blocks_are_ignored() -> None:
    content = f"```python\n{FINAL}\n```\nRun it with:\n```bash\npython main.py\n```"
    assert extract_final_code(content) == FINAL


def test_no_fence_answer_that_is_python() -> None:
    content = f"<think>hmm</think>\n{FINAL}\n"
    assert extract_final_code(content, entry_point="word_count") == FINAL


def test_no_fence_code_inside_prose() -> None:
    content = f"</think>The function is:\n\n{FINAL}\n\nThis counts words in O(n)."
    assert extract_final_code(content, entry_point="word_count") == FINAL


def test_no_code_at_all() -> None:
    assert extract_final_code("<think>x</think>I don't know.") is None
    result = classify_answer("<think>x</think>I don't know.", entry_point="fib")
    assert result.kind is AnswerKind.NO_CODE


def test_truncated_reasoning_returns_none() -> None:
    content = f"<think>Let me draft:\n```python\n{DRAFT}```\nand then"
    assert extract_final_code(content, entry_point="word_count") is None
    result = classify_answer(content, entry_point="word_count", finish_reason="length")
    assert result.kind is AnswerKind.TRUNCATED
    # Parser on and cut off: everything is reasoning, content is empty.
    result = classify_answer("", f"```python\n{DRAFT}```", "word_count", finish_reason="stop")
    assert result.kind is AnswerKind.TRUNCATED
    assert result.reason == "reasoning never ended"


def test_length_finish_is_truncated_even_with_code() -> None:
    content = f"</think>```python\n{FINAL}\n```\nMore text that got cut"
    result = classify_answer(content, entry_point="word_count", finish_reason="length")
    assert result.kind is AnswerKind.TRUNCATED
    assert classify_answer(content, entry_point="word_count").kind is AnswerKind.CODE


def test_crlf_line_endings() -> None:
    output = thinking_output().replace("\n", "\r\n")
    assert extract_final_code(output, entry_point="word_count") == FINAL


def test_tilde_fences_and_stray_spaces() -> None:
    content = f"</think>\n  ~~~ Python  \n{FINAL}\n  ~~~   \n"
    assert extract_final_code(content, entry_point="word_count") == FINAL


def test_unterminated_final_fence() -> None:
    content = f"</think>Here:\n```python\n{FINAL}\n"
    assert extract_final_code(content, entry_point="word_count") == FINAL


def test_closing_fence_glued_to_last_line() -> None:
    content = f"</think>\n```python\n{FINAL}```\nDone."
    assert extract_final_code(content, entry_point="word_count") == FINAL


def test_indented_fence_in_a_list_item_is_dedented() -> None:
    indented = "\n".join("    " + line for line in FINAL.splitlines())
    content = f"</think>1. The code:\n    ```python\n{indented}\n    ```\n"
    assert extract_final_code(content, entry_point="word_count") == FINAL


def test_broken_final_block_is_still_the_answer() -> None:
    # The model's final answer does not compile: SYNTAX, not a silent fallback to a draft.
    content = f"<think>```python\n{FINAL}\n```</think>```python\n{DRAFT}```"
    assert extract_final_code(content, entry_point="word_count") == DRAFT.rstrip("\n")


@pytest.mark.parametrize(
    ("content", "reasoning", "expected"),
    [
        ("<think>a</think>b", None, ("a", "b")),
        ("a</think>b", None, ("a", "b")),
        ("b", "a", ("a", "b")),
        ("<think>a", None, ("a", None)),
        ("plain", None, ("", "plain")),
        ("", "all reasoning", ("all reasoning", None)),
    ],
)
def test_split_reasoning(
    content: str, reasoning: str | None, expected: tuple[str, str | None]
) -> None:
    split = split_reasoning(content, reasoning)
    assert (split.reasoning, split.answer) == expected
