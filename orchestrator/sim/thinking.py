"""The simulated "thinking model": what text a prompt gets, and how a reasoning parser splits it.

Coding prompts ("Write a Python function `NAME` ...") are answered like a reasoning model does:
``<think>`` reasoning holding one or more DRAFT code blocks (the first one wrong or cut short),
``</think>``, then the final answer with the final code block. The final code is right most of
the time and wrong with probability ``coding_wrong_rate``, decided by a hash of the prompt and the
server seed, so temperature 0 is deterministic and identical across speculative configs
(speculative decoding is lossless). Other prompts get filler prose.

Built-in problems with reference solutions: is_palindrome, fib, merge_sorted, word_count, gcd.
Any other entry point named in the prompt gets a generic, plausible-but-untestable function.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from orchestrator.sim.content import ContentClass
from orchestrator.sim.tokenizer import THINK_CLOSE, THINK_OPEN, tokenize

REASONING_PARSERS: tuple[str, ...] = ("kimi_k2", "qwen3", "deepseek-r1", "deepseek-v3", "kimi")

_ENTRY_POINT = re.compile(
    r"(?:python\s+)?function\s+(?:called\s+|named\s+)?`?([A-Za-z_]\w*)`?|def\s+([A-Za-z_]\w*)\s*\(",
    re.I,
)


@dataclass(frozen=True)
class Solution:
    """A problem's correct final code, a wrong variant and a draft that is cut short."""

    correct: str
    wrong: str
    draft: str
    flaw: str


def _planted(correct: str, *edits: tuple[str, str]) -> str:
    """``correct`` with a bug planted: each ``(old, new)`` replaces the one ``old`` it holds, so
    a wrong variant is visibly the correct code but for its bug."""
    wrong = correct
    for old, new in edits:
        if wrong.count(old) != 1:
            raise ValueError(f"a bug's place must be in the code once: {old!r}")
        wrong = wrong.replace(old, new)
    return wrong


def _planted_solution(
    correct: str, *, bugs: tuple[tuple[str, str], ...], draft: str, flaw: str
) -> Solution:
    """A problem whose wrong variant is its correct code with ``bugs`` planted."""
    return Solution(correct, _planted(correct, *bugs), draft, flaw)


def _palindrome(prompt: str) -> Solution:
    literal = "def is_palindrome(s: str) -> bool:\n    return s == s[::-1]\n"
    if re.search(r"ignor|case|punctuation|alphanumeric", prompt, re.I):
        # Asked to normalise: comparing the string as it is, is the wrong answer.
        correct = (
            "def is_palindrome(s: str) -> bool:\n"
            "    cleaned = [c.lower() for c in s if c.isalnum()]\n"
            "    return cleaned == cleaned[::-1]\n"
        )
        wrong = literal
    else:
        correct = literal
        wrong = _planted(literal, ("s == s[::-1]", "s[1:] == s[::-1][1:]"))
    draft = "def is_palindrome(s):\n    for i in range(len(s)):\n        if s[i] != s[-i]:\n"
    return Solution(correct, wrong, draft, "s[-i] compares the wrong characters when i is 0")


_FIB = _planted_solution(
    "def fib(n: int) -> int:\n"
    "    a, b = 0, 1\n"
    "    for _ in range(n):\n"
    "        a, b = b, a + b\n"
    "    return a\n",
    bugs=(("a, b = 0, 1", "a, b = 1, 1"),),
    draft="def fib(n):\n    return fib(n - 1) + fib(n - 2)\n",
    flaw="the recursion has no base case and is exponential",
)

_MERGE_SORTED = _planted_solution(
    "def merge_sorted(a: list, b: list) -> list:\n"
    "    result = []\n"
    "    i = j = 0\n"
    "    while i < len(a) and j < len(b):\n"
    "        if a[i] <= b[j]:\n"
    "            result.append(a[i])\n"
    "            i += 1\n"
    "        else:\n"
    "            result.append(b[j])\n"
    "            j += 1\n"
    "    result.extend(a[i:])\n"
    "    result.extend(b[j:])\n"
    "    return result\n",
    bugs=(("    result.extend(a[i:])\n    result.extend(b[j:])\n", ""),),
    draft="def merge_sorted(a, b):\n    result = []\n    while a and b:\n        result.append(\n",
    flaw="popping from the front of a list is quadratic",
)


def _word_count(prompt: str) -> Solution:
    wants_dict = bool(re.search(r"dict|frequenc|each word|occurrence|mapping", prompt, re.I))
    if wants_dict:
        correct = (
            "def word_count(text: str) -> dict:\n"
            "    counts: dict = {}\n"
            "    for word in text.lower().split():\n"
            "        word = word.strip('.,!?;:\"\\'()[]{}')\n"
            "        if word:\n"
            "            counts[word] = counts.get(word, 0) + 1\n"
            "    return counts\n"
        )
        wrong = (
            "def word_count(text: str) -> dict:\n"
            "    counts: dict = {}\n"
            "    for word in text.split(' '):\n"
            "        counts[word] = counts.get(word, 0) + 1\n"
            "    return counts\n"
        )
    else:
        correct = "def word_count(text: str) -> int:\n    return len(text.split())\n"
        wrong = "def word_count(text: str) -> int:\n    return text.count(' ') + 1\n"
    draft = "def word_count(text):\n    counts = {}\n    for word in text.split(' ')\n"
    return Solution(correct, wrong, draft, "the for statement is missing its colon")


_GCD = _planted_solution(
    "def gcd(a: int, b: int) -> int:\n"
    "    a, b = abs(a), abs(b)\n"
    "    while b:\n"
    "        a, b = b, a % b\n"
    "    return a\n",
    bugs=(("    a, b = abs(a), abs(b)\n", ""), ("return a", "return b")),
    draft="def gcd(a, b):\n    for d in range(min(a, b), 0, -1):\n",
    flaw="counting down is too slow for large inputs",
)


def _generic(name: str) -> Solution:
    correct = (
        f"def {name}(*args, **kwargs):\n"
        f'    """Solve the task `{name}` describes."""\n'
        "    if len(args) == 1 and not kwargs:\n"
        "        return args[0]\n"
        "    return args\n"
    )
    wrong = f"def {name}(*args, **kwargs):\n    return None\n"
    draft = f"def {name}(*args):\n    pass\n"
    return Solution(correct, wrong, draft, "it returns nothing useful yet")


_FIXED: dict[str, Solution] = {"fib": _FIB, "merge_sorted": _MERGE_SORTED, "gcd": _GCD}
"""Problems whose prompt does not change the answer."""
_BY_PROMPT: dict[str, Callable[[str], Solution]] = {
    "is_palindrome": _palindrome,
    "word_count": _word_count,
}
"""Problems whose prompt chooses which function is right (normalised, a dict of counts)."""


def _solution(name: str, prompt: str) -> Solution:
    """The built-in problem ``name`` as ``prompt`` asks it, else a generic function."""
    fixed = _FIXED.get(name)
    if fixed is not None:
        return fixed
    factory = _BY_PROMPT.get(name)
    return factory(prompt) if factory is not None else _generic(name)


_FILLER_TEXT = (
    "the model the server a request batch of tokens is decoded and each step verifies draft "
    "accepted cache context throughput latency with for in on under when while system GPU "
    "memory scheduler speculative tree budget window long short stream client measure result"
)
_FILLER_WORDS: tuple[str, ...] = tuple(_FILLER_TEXT.split())


class ParserKind(Enum):
    """Whether the server splits reasoning from content."""

    NONE = "none"
    THINK_TAGS = "think-tags"


def parser_kind(reasoning_parser: str | None) -> ParserKind:
    return ParserKind.NONE if reasoning_parser is None else ParserKind.THINK_TAGS


def find_entry_point(prompt: str) -> str | None:
    """The function name a coding prompt asks for, or None when it is not a coding prompt."""
    for match in _ENTRY_POINT.finditer(prompt):
        name = match.group(1) or match.group(2)
        if name and name.lower() not in {"that", "which", "to", "in", "the", "a"}:
            return name
    return None


def prompt_seed(prompt: str, seed: int, nonce: int = 0) -> int:
    """Stable per-prompt seed (not Python's randomised hash)."""
    digest = hashlib.sha256(f"{seed}\0{nonce}\0{prompt}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _filler(rng: random.Random, n_words: int) -> str:
    words: list[str] = []
    for i in range(n_words):
        word = rng.choice(_FILLER_WORDS)
        if i == 0 or words[-1].endswith("."):
            word = word.capitalize()
        if rng.random() < 0.1:
            word += "."
        words.append(word)
    return " ".join(words)


def coding_answer_is_wrong(prompt: str, seed: int, wrong_rate: float, nonce: int = 0) -> bool:
    """Whether this prompt's final code is the wrong variant (seeded, deterministic)."""
    rng = random.Random(prompt_seed(prompt, seed, nonce) ^ 0x5EED)
    return rng.random() < wrong_rate


def coding_text(prompt: str, name: str, seed: int, wrong_rate: float, nonce: int = 0) -> str:
    """The whole output for a coding prompt: <think> drafts </think> answer."""
    rng = random.Random(prompt_seed(prompt, seed, nonce))
    solution = _solution(name, prompt)
    final = solution.wrong if coding_answer_is_wrong(prompt, seed, wrong_rate, nonce) else (
        solution.correct
    )
    second_draft = solution.correct if rng.random() < 0.5 else solution.wrong
    reasoning = (
        f"The user wants a Python function `{name}`. Let me think about the edge cases first: "
        f"{_filler(rng, rng.randint(20, 60))}\n\n"
        "A first attempt:\n\n"
        f"```python\n{solution.draft}```\n\n"
        f"Wait, that is not right: {solution.flaw}. Let me fix it.\n\n"
        f"```python\n{second_draft}```\n\n"
        f"Let me check it against a few inputs. {_filler(rng, rng.randint(40, 120))}\n"
        "That looks right, so I will give the final version."
    )
    answer = (
        f"\n\nHere is the implementation of `{name}`:\n\n"
        f"```python\n{final}```\n\n"
        f"{_filler(rng, rng.randint(15, 40))}"
    )
    return f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}{answer}"


def filler_text(prompt: str, seed: int, n_tokens: int, nonce: int = 0) -> list[str]:
    """Exactly ``n_tokens`` tokens of prose, deterministic for (prompt, seed, nonce)."""
    rng = random.Random(prompt_seed(prompt, seed, nonce) ^ 0xF111)
    tokens: list[str] = []
    while len(tokens) < n_tokens:
        tokens += tokenize(" " + _filler(rng, 64))
    return tokens[:n_tokens]


NATURAL_LENGTHS: dict[ContentClass, tuple[int, int]] = {
    ContentClass.PLAIN: (64, 512),
    ContentClass.PROSE: (32, 256),
    ContentClass.CODE: (256, 1024),
    ContentClass.REPETITIVE: (64, 512),
}
"""A non-coding answer's natural length, uniform in [low, high] tokens, by the request's content
class (:mod:`orchestrator.sim.content`): chat answers short, code long; plain text as before."""


@dataclass(frozen=True)
class Completion:
    """The tokens a request will produce and why it stops."""

    tokens: tuple[str, ...]
    finish: str
    """"stop" (end of text) or "length" (max_new_tokens reached)."""


def plan_completion(
    prompt: str,
    *,
    max_new_tokens: int,
    ignore_eos: bool,
    seed: int,
    wrong_rate: float,
    nonce: int = 0,
    content: ContentClass = ContentClass.PLAIN,
    seed_text: str | None = None,
) -> Completion:
    """Decide the full output of one request before it is decoded.

    Coding prompts (an entry point named in ``prompt``, the last user message) have a natural
    end; other prompts a natural length drawn from :data:`NATURAL_LENGTHS` for the request's
    ``content`` class, seeded by ``seed_text`` (the whole request's text; default ``prompt``).
    ``ignore_eos`` continues with filler to exactly ``max_new_tokens``.
    """
    name = find_entry_point(prompt)
    if name is not None:
        natural = tokenize(coding_text(prompt, name, seed, wrong_rate, nonce))
    else:
        text = prompt if seed_text is None else seed_text
        rng = random.Random(prompt_seed(text, seed, nonce) ^ 0x1E47)
        natural = filler_text(text, seed, rng.randint(*NATURAL_LENGTHS[content]), nonce)
    if len(natural) >= max_new_tokens:
        return Completion(tuple(natural[:max_new_tokens]), "length")
    if ignore_eos:
        extra = filler_text(prompt + "\0more", seed, max_new_tokens - len(natural), nonce)
        return Completion(tuple(natural + extra), "length")
    return Completion(tuple(natural), "stop")


@dataclass
class ReasoningSplitter:
    """Streams tokens into (reasoning, content) the way SGLang's think-tag parsers do.

    An output that opens with ``<think>`` is reasoning up to ``</think>`` (markers dropped), then
    content; an output without the opening marker is all content. Without a parser everything,
    markers included, is content.
    """

    kind: ParserKind
    in_reasoning: bool | None = None

    def feed(self, tokens: list[str] | tuple[str, ...]) -> tuple[str, str]:
        """Split a chunk's tokens; returns (reasoning_text, content_text)."""
        if self.kind is ParserKind.NONE:
            return "", "".join(tokens)
        reasoning: list[str] = []
        content: list[str] = []
        for token in tokens:
            if self.in_reasoning is None:
                self.in_reasoning = token == THINK_OPEN
            if self.in_reasoning:
                if token == THINK_CLOSE:
                    self.in_reasoning = False
                elif token != THINK_OPEN:
                    reasoning.append(token)
            else:
                content.append(token)
        return "".join(reasoning), "".join(content)
