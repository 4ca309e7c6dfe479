"""The simulated model's tokenizer: a documented regex, shared by prompt counting and generation.

A token is one of (first match wins at each position):

1. a reasoning marker ``<think>`` or ``</think>`` (a single special token, like real models);
2. a run of whitespace directly before a marker (so markers never swallow a newline);
3. optional leading whitespace followed by a word (``\\w+``) or by one other non-space character;
4. trailing whitespace at the very end of the text.

Concatenating the tokens gives back the text exactly, so the server can stream token slices and a
client can re-count them. The chat template adds ``CHAT_TOKENS_PER_MESSAGE`` per message plus
``CHAT_TOKENS_ASSISTANT_PREFIX`` once, so a client must calibrate against ``usage.prompt_tokens``
exactly as it would against a real model's template.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_TOKEN = re.compile(r"</?think>|\s+(?=</?think>)|\s*(?:\w+|[^\w\s])|\s+")

CHAT_TOKENS_PER_MESSAGE = 4
"""``<|im_start|>``, the role, a newline, ``<|im_end|>``: what a typical template adds."""
CHAT_TOKENS_ASSISTANT_PREFIX = 3
"""The open assistant turn the template appends for generation."""


def tokenize(text: str) -> list[str]:
    """Split ``text`` into tokens whose concatenation is ``text``."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    return len(tokenize(text))


def chat_prompt_tokens(messages: Iterable[tuple[str, str]]) -> list[str]:
    """The templated prompt of a chat request as tokens, from its (role, text) messages."""
    return template_tokens((role, tokenize(content)) for role, content in messages)


def template_tokens(messages: Iterable[tuple[str, Sequence[str]]]) -> list[str]:
    """The templated prompt from (role, the text's tokens) messages, any number of turns.

    Each message is ``<|im_start|>``, role, newline, its text's tokens, ``<|im_end|>`` (4 extra
    tokens, whatever the role: system, user, assistant alike); then ``<|im_start|>``,
    ``assistant``, newline opens the reply (3 tokens). Each message is tokenized on its own,
    so a multi-turn prompt counts sum(4 + tokens of each text) + 3.
    """
    tokens: list[str] = []
    for role, content in messages:
        tokens += ["<|im_start|>", role, "\n", *content, "<|im_end|>"]
    tokens += ["<|im_start|>", "assistant", "\n"]
    return tokens
