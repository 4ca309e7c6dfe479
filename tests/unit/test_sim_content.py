"""The simulator's content rule: what a request's text is, and what that does to acceptance and
answer length. Plain text (the synthetic filler prompts) must keep the model as it was."""

from __future__ import annotations

import json
import math
import random
import statistics
import textwrap
from pathlib import Path

import pytest
import yaml

from orchestrator import cli
from orchestrator.bench.prompts import build_prompt
from orchestrator.bench.workloads import parse_sample
from orchestrator.sim.content import (
    CODE_SHARE,
    WINDOW,
    ContentClass,
    classify,
    profile_text,
    profile_tokens,
)
from orchestrator.sim.perfmodel import (
    PerfParams,
    SpecShape,
    content_shift,
    expected_accept_len,
    per_depth_acceptance,
    steady_throughput,
)
from orchestrator.sim.server_args import build_parser, resolve
from orchestrator.sim.thinking import NATURAL_LENGTHS, plan_completion
from orchestrator.sim.tokenizer import chat_prompt_tokens, template_tokens, tokenize
from orchestrator.sim.truth import sample_content, sweep_truth
from orchestrator.sweepfile import parse_sweep

P = PerfParams()

CODE_TEXT = Path(textwrap.__file__).read_text(encoding="utf-8")
"""A real Python module (every installation carries it)."""
CHAT_TEXT = (
    "I'm planning a trip to Japan next spring with my partner. We have about ten days, and we "
    "love food, hiking and quiet places. Could you suggest an itinerary? We'd rather avoid the "
    "most crowded spots, but we do want to see Kyoto. Also, is the rail pass still worth it?"
)
CODEGEN_TEXT = "Write a function to find the shared elements from the given two lists."
REPEATED_TEXT = " ".join(["Copy this line exactly as it is written here, please."] * 12)


def shape_for(*flags: str, env: dict[str, str] | None = None) -> SpecShape:
    argv = ["--model-path", "m", *flags]
    ns = build_parser("0.5.23", True).parse_args(argv)
    return resolve(ns, argv, version="0.5.23", ddtree=True, environ=env or {}).shape


DFLASH = shape_for("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d")
NGRAM = shape_for("--speculative-algorithm", "NGRAM")


def ddtree(budget: int) -> SpecShape:
    return shape_for(
        "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "d",
        "--speculative-ddtree-budget", str(budget), env={"SGLANG_DDTREE_MAX_TOPK": "4"},
    )


@pytest.mark.parametrize("words", [0, 10, 1000, 20_000])
def test_synthetic_filler_prompts_are_plain(words: int) -> None:
    """The filler prompts of every length, as /generate text and as one chat message."""
    text = build_prompt(987_654_321 + words, words)
    assert classify(text) is ContentClass.PLAIN
    chat = [("user", text)]
    content = [token for _, content in chat for token in tokenize(content)]
    assert profile_tokens(content).content is ContentClass.PLAIN


def test_the_rule_tells_code_prose_codegen_and_repetition_apart() -> None:
    code = profile_text(CODE_TEXT)
    assert code.content is ContentClass.CODE and code.code_share >= CODE_SHARE
    assert code.tokens == min(WINDOW, len(tokenize(CODE_TEXT)))
    chat = profile_text(CHAT_TEXT)
    assert chat.content is ContentClass.PROSE and chat.code_share == 0.0
    codegen = profile_text(CODEGEN_TEXT)  # prose that asks for code
    assert codegen.asks_for_code and codegen.content is ContentClass.CODE
    assert classify("Implement an LRU cache class with get and put.") is ContentClass.CODE
    assert classify("Can you write me a poem about the sea?") is ContentClass.PROSE
    assert classify(REPEATED_TEXT) is ContentClass.REPETITIVE
    question = CODE_TEXT + "\n\nWhat does `dedent` do with a line of only whitespace?"
    assert classify(question) is ContentClass.CODE
    assert classify("") is ContentClass.PLAIN


def test_the_rule_reads_only_the_last_window_of_tokens() -> None:
    prose_then_code = CHAT_TEXT * 400 + CODE_TEXT * 3
    assert len(tokenize(prose_then_code)) > 2 * WINDOW
    assert classify(prose_then_code) is ContentClass.CODE
    assert classify(CODE_TEXT * 3 + CHAT_TEXT * 400) is ContentClass.REPETITIVE


def test_plain_text_keeps_the_acceptance_exactly() -> None:
    """Plain adds exactly 0 to alpha0, so the closed form of the model before content."""
    for shape in (DFLASH, NGRAM, ddtree(8)):
        assert content_shift(shape, ContentClass.PLAIN, P) == 0.0
        for context in (512, 1024, 8192, 65536):
            excess = max(0.0, context - P.long_context_ref) / P.long_context_ref
            alpha0 = {"DFLASH": P.alpha_dflash, "DDTREE": P.alpha_dflash,
                      "NGRAM": P.alpha_ngram}[shape.algorithm]
            alpha = min(0.98, max(0.05, alpha0 - P.long_context_penalty * math.log2(1 + excess)))
            old = 1.0 - (1.0 - alpha) * float(shape.topk) ** (-P.topk_gain)
            assert per_depth_acceptance(shape, context, P) == old
            assert per_depth_acceptance(shape, context, P, ContentClass.PLAIN) == old


def test_code_and_repetition_accept_more_and_prose_less() -> None:
    for shape in (DFLASH, NGRAM, ddtree(10)):
        lens = {c: expected_accept_len(shape, 1024, P, c) for c in ContentClass}
        assert lens[ContentClass.PROSE] < lens[ContentClass.PLAIN] < lens[ContentClass.CODE]
        assert lens[ContentClass.CODE] < lens[ContentClass.REPETITIVE]
    # NGRAM drafts from the context itself: repetition lifts it most.
    ngram_gain = expected_accept_len(NGRAM, 1024, P, ContentClass.REPETITIVE) / (
        expected_accept_len(NGRAM, 1024, P)
    )
    dflash_gain = expected_accept_len(DFLASH, 1024, P, ContentClass.REPETITIVE) / (
        expected_accept_len(DFLASH, 1024, P)
    )
    assert ngram_gain > dflash_gain


@pytest.mark.parametrize("content", list(ContentClass))
def test_the_budget_keeps_an_interior_optimum_on_every_content(content: ContentClass) -> None:
    for concurrency in (1, 32):
        rates = {n: steady_throughput(ddtree(n), 1024, concurrency, P, content)
                 for n in range(2, 41)}
        best = max(rates, key=lambda n: rates[n])
        # Interior: neither the smallest budget nor the largest (the optimum falls with load:
        # 3 on prose at C=32).
        assert 2 < best <= 20, (content, concurrency, best)


def _natural_lengths(texts: list[str]) -> list[int]:
    lengths = []
    for text in texts:
        plan = plan_completion(
            text, max_new_tokens=4096, ignore_eos=False, seed=0, wrong_rate=0.0,
            content=classify(text),
        )
        assert plan.finish == "stop"
        lengths.append(len(plan.tokens))
    return lengths


def test_answers_are_long_for_code_and_short_for_chat_and_plain_as_before() -> None:
    rng = random.Random(5)
    by_class = {
        ContentClass.CODE: [f"# request {i}\n{CODE_TEXT[:3000]}" for i in range(40)],
        ContentClass.PROSE: [f"Hello, number {i}. {CHAT_TEXT}" for i in range(40)],
        ContentClass.PLAIN: [build_prompt(rng.getrandbits(40), 200) for _ in range(40)],
    }
    means = {}
    for content, texts in by_class.items():
        assert {classify(t) for t in texts} == {content}
        lengths = _natural_lengths(texts)
        low, high = NATURAL_LENGTHS[content]
        assert all(low <= n <= high for n in lengths), (content, lengths)
        assert _natural_lengths(texts) == lengths  # seeded by the text: deterministic
        means[content] = statistics.fmean(lengths)
    assert means[ContentClass.PROSE] < means[ContentClass.PLAIN] < means[ContentClass.CODE]
    # Plain keeps the old rule: 64-512 tokens seeded by the prompt.
    assert NATURAL_LENGTHS[ContentClass.PLAIN] == (64, 512)
    text = by_class[ContentClass.PLAIN][0]
    assert len(plan_completion(text, max_new_tokens=4096, ignore_eos=False, seed=0,
                               wrong_rate=0.0).tokens) == _natural_lengths([text])[0]


def test_ignore_eos_runs_every_class_to_max_tokens() -> None:
    for text in (CODE_TEXT[:2000], CHAT_TEXT, CODEGEN_TEXT, build_prompt(1, 50)):
        plan = plan_completion(text, max_new_tokens=700, ignore_eos=True, seed=0,
                               wrong_rate=0.0, content=classify(text))
        assert len(plan.tokens) == 700 and plan.finish == "length"


def test_a_multi_turn_template_counts_every_turn() -> None:
    turns = [("system", "You are terse."), ("user", "Hi there, how are you?"),
             ("assistant", "Fine."), ("user", "Write a function `gcd`.")]
    tokens = chat_prompt_tokens(turns)
    assert len(tokens) == sum(4 + len(tokenize(text)) for _, text in turns) + 3
    assert tokens == template_tokens((role, tokenize(text)) for role, text in turns)
    assert tokens[-3:] == ["<|im_start|>", "assistant", "\n"]
    assert [tokens[i + 1] for i, t in enumerate(tokens) if t == "<|im_start|>"] == [
        "system", "user", "assistant", "user", "assistant"]


SWEEP = {
    "name": "content",
    "hosts": [{"name": "h", "address": "127.0.0.1", "base_url": "http://127.0.0.1:30000"}],
    "server": {"model": "m", "knobs": {
        "algorithm": {"flag": "--speculative-algorithm"},
        "draft_model": {"flag": "--speculative-draft-model-path"},
    }},
    "configs": [{"algorithm": "DFLASH", "draft_model": "/d"}],
    "benchmark": {"contexts": [256], "concurrency": [2], "max_tokens": 32, "rounds": 1},
}


def test_sim_truth_states_the_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP), encoding="utf-8")
    accepts = {}
    for content in ("plain", "code", "prose"):
        assert cli.main(["sim", "truth", str(path), "--replications", "4", "--json",
                         "--content", content]) == 0
        cell = json.loads(capsys.readouterr().out)["configs"][0]["cells"][0]
        accepts[content] = cell["accept_len"]
    assert accepts["prose"] < accepts["plain"] < accepts["code"]
    sweep = parse_sweep(path.read_text(encoding="utf-8"), "s")
    default = sweep_truth(sweep, replications=4).configs[0].cells[0]
    assert default.accept_len == accepts["plain"]  # plain is the default: synthetic prompts
    assert cli.main(["sim", "truth", str(path), "--content", "poetry"]) == 2
    assert "neither a class" in capsys.readouterr().err

    # A workload sample: its requests' classes in line order, cycled over the point's requests.
    sample = tmp_path / "traffic.jsonl"
    lines = [{"messages": [{"role": "system", "content": "You help."},
                           {"role": "user", "content": text}]}
             for text in (CODE_TEXT[:1500], CHAT_TEXT)]
    sample.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert sample_content(parse_sample(sample.read_text(), filename="t", label="file:t")) == (
        ContentClass.CODE, ContentClass.PROSE)
    assert cli.main(["sim", "truth", str(path), "--replications", "4", "--json",
                     "--content", str(sample)]) == 0
    mixed = json.loads(capsys.readouterr().out)["configs"][0]["cells"][0]["accept_len"]
    assert accepts["prose"] < mixed < accepts["code"]
    sample.write_text(json.dumps(lines[0]) + "\n{not json\n", encoding="utf-8")
    assert cli.main(["sim", "truth", str(path), "--content", str(sample)]) == 2
    assert capsys.readouterr().err.startswith(f"{sample}:2: ")
