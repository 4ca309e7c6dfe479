"""The coding anchor end to end: problems, a real simulated SGLang server over HTTP, the sandbox,
and the losslessness check between a baseline and speculative configs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.bench.client import BenchClient
from orchestrator.bench.coding import (
    Completion,
    CompletionError,
    HttpCompleter,
    Outcome,
    run_coding,
    summarize,
)
from orchestrator.bench.lossless import check_lossless, compare_outputs, first_divergence
from orchestrator.bench.problems import (
    SEED_PROBLEM_IDS,
    ProblemFileError,
    builtin_problems,
    load_problem_file,
    parse_problems,
    select,
)
from orchestrator.bench.sandbox import RunOutcome, run_candidate
from orchestrator.points import CodingPoint
from orchestrator.types import ApiKind
from tests.integration.sim_server_proc import SimServer, free_port, start_server

SGLANG = engines.get("sglang")


async def test_a_url_target_names_its_engine() -> None:
    """A base URL alone says nothing of the engine behind it: no dialect is guessed."""
    with pytest.raises(TypeError, match="dialect"):
        await run_coding("http://127.0.0.1:1", SEEDS[:1])

SEEDS = select(builtin_problems(), SEED_PROBLEM_IDS)
DFLASH = [
    "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "z-lab/dflash",
    "--speculative-draft-window-size", "2048",
]  # fmt: skip

# Reference solutions: every built-in problem's hidden tests must pass a correct answer.
REFERENCES = {
    "is_palindrome": "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n"
    "    return t == t[::-1]\n",
    "fib": "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n",
    "merge_sorted": "def merge_sorted(a, b):\n    return sorted(a + b)\n",
    "word_count": "def word_count(text):\n    out = {}\n    for w in text.lower().split():\n"
    "        w = w.strip('.,!?;:\\'\"()[]{}')\n        if w:\n"
    "            out[w] = out.get(w, 0) + 1\n    return out\n",
    "gcd": "def gcd(a, b):\n    a, b = abs(a), abs(b)\n    while b:\n        a, b = b, a % b\n"
    "    return a\n",
    "flatten": "def flatten(x):\n    out = []\n    for i in x:\n"
    "        out.extend(flatten(i) if isinstance(i, list) else [i])\n    return out\n",
    "is_prime": "def is_prime(n):\n"
    "    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))\n",
    "reverse_words": "def reverse_words(s):\n    return ' '.join(reversed(s.split()))\n",
    "two_sum": "def two_sum(nums, target):\n    seen = {}\n    for j, x in enumerate(nums):\n"
    "        if target - x in seen:\n            return [seen[target - x], j]\n"
    "        seen[x] = j\n",
    "binary_search": "import bisect\ndef binary_search(arr, x):\n"
    "    i = bisect.bisect_left(arr, x)\n    return i if i < len(arr) and arr[i] == x else -1\n",
    "roman_to_int": "def roman_to_int(s):\n"
    "    v = dict(I=1, V=5, X=10, L=50, C=100, D=500, M=1000)\n    total = 0\n"
    "    for a, b in zip(s, s[1:] + ' '):\n"
    "        total += -v[a] if b != ' ' and v[a] < v[b] else v[a]\n    return total\n",
    "is_anagram": "def is_anagram(a, b):\n"
    "    return sorted(a.replace(' ', '').lower()) == sorted(b.replace(' ', '').lower())\n",
    "max_subarray_sum": "def max_subarray_sum(nums):\n    best = cur = nums[0]\n"
    "    for x in nums[1:]:\n        cur = max(x, cur + x)\n        best = max(best, cur)\n"
    "    return best\n",
    "count_vowels": "def count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)\n",
    "chunk": "def chunk(items, size):\n"
    "    return [items[i:i + size] for i in range(0, len(items), size)]\n",
    "rotate_right": "def rotate_right(items, k):\n    if not items:\n        return []\n"
    "    k %= len(items)\n    return items[-k:] + items[:-k] if k else list(items)\n",
    "valid_parentheses": "def valid_parentheses(s):\n    st = []\n"
    "    pairs = {')': '(', ']': '[', '}': '{'}\n    for c in s:\n"
    "        if c in pairs:\n            if not st or st.pop() != pairs[c]:\n"
    "                return False\n        else:\n            st.append(c)\n    return not st\n",
    "run_length_encode": "import itertools\ndef run_length_encode(s):\n"
    "    return ''.join(f'{k}{len(list(g))}' for k, g in itertools.groupby(s))\n",
    "dedupe": "def dedupe(items):\n    return list(dict.fromkeys(items))\n",
    "transpose": "def transpose(m):\n    return [list(r) for r in zip(*m)]\n",
    "digit_sum": "def digit_sum(n):\n    return sum(int(c) for c in str(abs(n)))\n",
    "caesar_cipher": "def caesar_cipher(text, shift):\n    out = []\n    for c in text:\n"
    "        if c.isascii() and c.isalpha():\n"
    "            base = ord('a') if c.islower() else ord('A')\n"
    "            c = chr((ord(c) - base + shift) % 26 + base)\n        out.append(c)\n"
    "    return ''.join(out)\n",
    "second_largest": "def second_largest(nums):\n    v = sorted(set(nums))\n"
    "    return v[-2] if len(v) > 1 else None\n",
    "factorial": "import math\ndef factorial(n):\n    return math.factorial(n)\n",
    "title_case": "def title_case(s):\n"
    "    return ' '.join(w[:1].upper() + w[1:].lower() for w in s.split(' '))\n",
}


# ------------------------------------------------------------------------------- problems


def test_builtin_problems_start_with_the_seeds_five() -> None:
    problems = builtin_problems()
    assert len(problems) >= 20
    assert [p.id for p in problems[:5]] == list(SEED_PROBLEM_IDS)
    for problem in problems:
        assert problem.entry_point == problem.id
        assert f"`{problem.entry_point}(" in problem.prompt
        assert "```python" in problem.prompt
        assert problem.tests.count("assert ") >= 4, problem.id


async def test_every_builtin_problem_passes_its_reference_and_fails_a_stub() -> None:
    problems = builtin_problems()
    assert set(REFERENCES) == {p.id for p in problems}
    gate = asyncio.Semaphore(4)

    async def check(problem_id: str, tests: str, code: str) -> tuple[str, RunOutcome, str]:
        async with gate:
            result = await run_candidate(code, tests)
            return problem_id, result.outcome, result.detail

    good = await asyncio.gather(*(check(p.id, p.tests, REFERENCES[p.id]) for p in problems))
    assert [(pid, o) for pid, o, _ in good if o is not RunOutcome.PASS] == []
    stubs = await asyncio.gather(
        *(check(p.id, p.tests, f"def {p.entry_point}(*args):\n    return None\n")
          for p in problems)
    )  # fmt: skip
    assert [(pid, o) for pid, o, _ in stubs if o is RunOutcome.PASS] == []


def test_problem_file_errors_name_the_line(tmp_path: Path) -> None:
    good = {"id": "inc", "prompt": "Write `inc(x)`.", "entry_point": "inc",
            "tests": "assert inc(1) == 2\n"}  # fmt: skip
    lines = [
        json.dumps(good),
        "",
        "{not json",
        json.dumps({**good, "id": "x", "entry_point": "not an identifier"}),
        json.dumps({k: v for k, v in good.items() if k != "tests"}),
        json.dumps({**good, "id": "y", "tests": "assert (\n"}),
        json.dumps(good),
        json.dumps([1, 2]),
    ]
    path = tmp_path / "problems.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ProblemFileError) as info:
        load_problem_file(path)
    lines_reported = [e.line for e in info.value.errors]
    assert lines_reported == [3, 4, 5, 6, 7, 8]
    text = str(info.value)
    assert f"{path}:3: not JSON" in text
    assert f"{path}:5: missing field(s): tests" in text
    assert "duplicate id 'inc' (first on line 1)" in text
    assert "tests are not valid Python" in text


def test_problem_file_loads_and_selects(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    rows = [
        {"id": f"p{i}", "prompt": f"Write `f{i}(x)`.", "entry_point": f"f{i}",
         "tests": f"assert f{i}(1) == 1\n"}
        for i in range(3)
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    problems = load_problem_file(path)
    assert [p.id for p in select(problems, ["p2", "p0"])] == ["p2", "p0"]
    with pytest.raises(ProblemFileError, match="unknown problem id 'nope'"):
        select(problems, ["nope"])
    assert parse_problems("\n\n") == []


# ---------------------------------------------------------------------- against the server


@pytest.fixture
def sim(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SimServer]:
    flags, settings = request.param
    server = start_server(tmp_path, ["--model-path", "m", *flags], settings)
    try:
        yield server
    finally:
        server.stop()


CORRECT = {"coding_wrong_rate": 0.0}


@pytest.mark.parametrize(
    "sim",
    [([], CORRECT), (["--reasoning-parser", "kimi_k2"], CORRECT)],
    indirect=True,
    ids=["markers-in-content", "reasoning-parser"],
)
async def test_thinking_model_scores_five_of_five(sim: SimServer) -> None:
    await sim.wait_ready()
    results = await run_coding(
        sim.url, SEEDS, api="chat", model="m", max_tokens=4096, temperature=0.0, timeout_s=30,
        dialect=SGLANG.dialect("chat"),
    )
    assert [r.problem for r in results] == list(SEED_PROBLEM_IDS)
    assert [r.outcome for r in results] == [Outcome.PASS] * 5, [r.detail for r in results]
    for result in results:
        assert result.finish_reason == "stop"
        assert result.completion_tokens and result.completion_tokens > 50
        assert result.containment is not None  # the sandbox ran it
        assert result.provenance.started_at is not None and result.provenance.finished_at
        # The output holds drafts: the first block of it is NOT what was run.
        assert result.output.count("```python") >= 3
        assert result.code is not None and result.code in result.output
    summary = summarize(results)
    assert (summary.passed, summary.scored, summary.pass_rate) == (5, 5, 1.0)


@pytest.mark.parametrize("sim", [([], {"coding_wrong_rate": 1.0})], indirect=True)
async def test_wrong_final_answers_fail_and_generate_api_works(sim: SimServer) -> None:
    await sim.wait_ready()
    results = await run_coding(
        sim.url, SEEDS, api="generate", model="m", max_tokens=4096, temperature=0.0, timeout_s=30,
        dialect=SGLANG.dialect("generate"),
    )
    assert [r.outcome for r in results] == [Outcome.FAIL] * 5, [r.detail for r in results]
    assert summarize(results).pass_rate == 0.0


@pytest.mark.parametrize(
    "sim", [([], CORRECT), (["--reasoning-parser", "qwen3"], CORRECT)], indirect=True
)
async def test_cut_off_reasoning_is_truncated_not_wrong(sim: SimServer) -> None:
    await sim.wait_ready()
    results = await run_coding(
        sim.url, SEEDS[:2], model="m", max_tokens=60, temperature=0.0, timeout_s=30,
        dialect=SGLANG.dialect("chat"),
    )
    assert [r.outcome for r in results] == [Outcome.TRUNCATED] * 2
    assert all(r.finish_reason == "length" and r.containment is None for r in results)
    summary = summarize(results)
    assert (summary.scored, summary.pass_rate) == (0, None)


async def test_unreachable_server_is_a_request_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    chat = SGLANG.dialect("chat")
    results = await run_coding(url, SEEDS[:1], model="m", timeout_s=5, dialect=chat)
    assert results[0].outcome is Outcome.REQUEST_ERROR
    assert summarize(results).scored == 0


@pytest.mark.parametrize("sim", [([], CORRECT)], indirect=True)
async def test_injected_complete_function(sim: SimServer) -> None:
    """Any async complete(prompt, max_tokens, temperature) can drive the run."""
    await sim.wait_ready()
    seen: list[tuple[str, int, float]] = []
    async with HttpCompleter(
        sim.url, model="m", api="chat", timeout_s=30, dialect=SGLANG.dialect("chat")
    ) as http:

        async def complete(prompt: str, max_tokens: int, temperature: float) -> Completion:
            seen.append((prompt, max_tokens, temperature))
            if "gcd" in prompt:
                raise CompletionError("server said no", status=503, body="overloaded")
            return await http(prompt, max_tokens, temperature)

        results = await run_coding(
            complete, SEEDS, api="chat", model="m", max_tokens=3000, temperature=0.0,
            timeout_s=30, concurrency=2,
        )  # fmt: skip
    assert [p for p, _, _ in seen] == [p.prompt for p in SEEDS]
    assert {(m, t) for _, m, t in seen} == {(3000, 0.0)}
    assert [r.outcome for r in results] == [Outcome.PASS] * 4 + [Outcome.REQUEST_ERROR]
    assert "503" in results[-1].detail


@pytest.mark.parametrize(
    "sim", [(["--reasoning-parser", "kimi_k2"], CORRECT)], indirect=True, ids=["parser"]
)
@pytest.mark.parametrize("api", ["chat", "generate"])
async def test_runs_over_the_benchmark_streaming_client(sim: SimServer, api: ApiKind) -> None:
    await sim.wait_ready()
    async with BenchClient(
        sim.url, api=api, model="m", concurrency=1, request_timeout=30, engine=SGLANG
    ) as client:
        results = await run_coding(client, SEEDS[:3], max_tokens=4096, temperature=0.0)
        truncated = await run_coding(client, SEEDS[:1], max_tokens=40, temperature=0.0)
    assert [r.outcome for r in results] == [Outcome.PASS] * 3, [r.detail for r in results]
    for result in results:
        assert result.finish_reason == "stop"
        assert result.completion_tokens and result.completion_tokens > 50
        # The output is the reasoning, then the answer, drafts and all.
        assert result.output.count("```python") >= 2
        if api == "chat":  # the parser took the reasoning out of its markers
            assert "</think>" not in result.output
        else:  # /generate applies no parser: markers stay in the text
            assert "</think>" in result.output
    assert truncated[0].outcome is Outcome.TRUNCATED


# ---------------------------------------------------------------------------- losslessness


async def _outputs(
    tmp: Path, name: str, flags: list[str], settings: dict[str, object]
) -> list[CodingPoint]:
    server = start_server(tmp, ["--model-path", "m", *flags], settings, name=name)
    try:
        await server.wait_ready()
        return await run_coding(
            server.url, SEEDS, model="m", max_tokens=4096, temperature=0.0, timeout_s=30,
            dialect=SGLANG.dialect("chat"),
        )
    finally:
        server.stop()


async def test_lossless_config_matches_and_drifting_config_is_flagged(tmp_path: Path) -> None:
    baseline = await _outputs(tmp_path, "base", [], {"seed": 7, "coding_wrong_rate": 0.0})
    speculative = await _outputs(tmp_path, "dflash", DFLASH, {"seed": 7, "coding_wrong_rate": 0.0})
    # A "broken build": same model, different outputs, and its tests may still pass.
    drifting = await _outputs(tmp_path, "broken", DFLASH, {"seed": 8, "coding_wrong_rate": 0.0})

    same = check_lossless(baseline, speculative, temperature=0.0)
    assert (same.compared, same.exact_matches, same.exact_match_rate) == (5, 5, 1.0)
    assert not same.drifted and same.earliest_divergence_char is None

    drift = check_lossless(baseline, drifting, temperature=0.0)
    assert drift.drifted
    assert drift.exact_match_rate is not None and drift.exact_match_rate < 1.0
    assert all(r.outcome is Outcome.PASS for r in drifting)  # flagged although it passes
    diverged = [c for c in drift.comparisons if not c.identical]
    for comparison in diverged:
        assert comparison.first_divergence_char is not None
        assert comparison.first_divergence_token is not None
        assert comparison.first_divergence_token <= comparison.first_divergence_char

    with pytest.raises(ValueError, match="temperature 0"):
        check_lossless(baseline, speculative, temperature=0.7)


def test_compare_outputs_positions_and_tolerance() -> None:
    assert first_divergence("abc", "abc") is None
    assert first_divergence("abc", "abd") == 2
    assert first_divergence("ab", "abc") == 2
    report = compare_outputs(
        {"a": "def f(x): return x", "b": "same", "c": "only here"},
        {"a": "def f(x): return y", "b": "same", "d": "new"},
    )
    assert (report.compared, report.exact_matches, report.drifted) == (2, 1, True)
    first = report.comparisons[0]
    assert (first.first_divergence_char, first.first_divergence_token) == (17, 7)
    assert report.only_in_baseline == ("c",) and report.only_in_candidate == ("d",)
    tolerant = compare_outputs({"a": "x", "b": "y"}, {"a": "x", "b": "z"}, tolerance=0.5)
    assert not tolerant.drifted
