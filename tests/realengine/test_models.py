"""The tiny models' tokenizer against the bench's synthetic prompts (pure; part of ``make
test``): calibration can hit a context exactly only when every nonce has the same length and
each filler word adds one token, as in the usual BPE vocabularies."""

from __future__ import annotations

from orchestrator.bench.prompts import WORDS, build_prompt, nonce_text
from tests.realengine.models import build_vocabulary, tokenize

TEMPLATE_HEAD = "user\n"
"""What precedes the prompt in ChatML once ``<|im_start|>`` is split off as a special token:
the prompt's first word follows a newline, without a leading space."""


def test_every_prompt_word_is_one_token_with_or_without_its_space() -> None:
    vocab = build_vocabulary()
    split = {form: tokenize(vocab, form) for word in WORDS for form in (word, " " + word)}
    assert {form: pieces for form, pieces in split.items() if len(pieces) != 1} == {}
    assert all(pieces[0] in vocab.tokens for pieces in split.values())


def test_prompts_have_one_length_per_filler_count_whatever_the_nonce() -> None:
    vocab = build_vocabulary()
    nonces = [0, 1, 64, 4095, 10**6, 2**40 + 12345]
    for filler in (0, 1, 57, 123):
        lengths = {len(tokenize(vocab, TEMPLATE_HEAD + build_prompt(n, filler))) for n in nonces}
        head = len(tokenize(vocab, TEMPLATE_HEAD + nonce_text(0)))
        assert lengths == {head + filler}, filler


def test_the_vocabulary_is_the_same_on_every_build() -> None:
    assert build_vocabulary() == build_vocabulary()
