"""What a request's text is, as the simulated drafter sees it: a pure function of its tokens.

A real drafter accepts more where the next tokens are easy to guess (code, text that repeats
itself) and less on free prose, so the DFlash and DDTree papers report acceptance per task.
The simulator reads the request's content, never its origin (it knows no workload by name),
and puts it in one of four classes; :mod:`orchestrator.sim.perfmodel` shifts the drafter's
acceptance by class and :mod:`orchestrator.sim.thinking` picks the answer's natural length by
class. docs/simulator.md ("Content") states the rule and its constants.

The rule reads the last :data:`WINDOW` tokens of the content (a chat request's message texts
in order, the template's own tokens left out; a /generate request's text), so its cost is
bounded however long the context:

1. ``repetition`` = 1 - distinct 4-grams / 4-grams (tokens compared without their leading
   whitespace) >= :data:`REPETITIVE_SHARE`: **repetitive**;
2. else ``code_share`` = (tokens that are one of :data:`CODE_SYMBOLS`, or that start an
   indented line) / tokens >= :data:`CODE_SHARE`, or the text asks for code
   (``_CODE_REQUEST``: "write / implement / complete / fix ... a function / class /
   program / script / code ..." within one sentence): **code**;
3. else ``punctuation_share`` = (``.`` ``,`` ``?`` ``!`` tokens) / tokens >=
   :data:`PROSE_SHARE`: **prose** (free chat);
4. else **plain**: words without code, sentences or repeats, e.g. a bag of common words.
   Plain is the neutral class: the acceptance and answer lengths of the model before content
   mattered, exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from orchestrator.sim.tokenizer import tokenize

WINDOW = 4096
"""Content tokens the rule reads: the last ones (the drafter works from the recent context),
which bounds its cost (a few ms a request) however long the prompt."""
NGRAM = 4
REPETITIVE_SHARE = 0.6
"""Most 4-grams seen before: the text largely repeats itself (Python modules of the standard
library run at 0.2-0.45: code, not repetitive)."""
CODE_SHARE = 0.08
"""Python source runs at 15-35 % code tokens, prose below 2 %."""
PROSE_SHARE = 0.02
"""English prose has a comma or a full stop every 10-20 words; a word list has none."""
CODE_SYMBOLS = frozenset("()[]{}<>=;+*/%&|^~#@$`\\")
"""Characters that are tokens of code far more than of prose (``:``, ``-``, quotes and
apostrophes are common in prose and are left out)."""

_INDENTED_LINE = re.compile(r"\n(?:\t| {2,})\S")
_PUNCTUATION = frozenset(".,?!")
_CODE_REQUEST = re.compile(
    r"\b(?:write|implement|complete|create|generate|rewrite|fix|refactor|debug|optimi[sz]e)\b"
    r"[^.?!\n]{0,80}?"
    r"\b(?:function|class|method|program|script|code|module|query|regex|algorithm|snippet"
    r"|unit tests?)s?\b",
    re.IGNORECASE,
)


class ContentClass(Enum):
    """The four content classes of the rule above (the enum's values are its names in the
    docs, the truth's ``--content`` and ``/sim/requests``)."""

    PLAIN = "plain"
    PROSE = "prose"
    CODE = "code"
    REPETITIVE = "repetitive"


CONTENT_CLASSES: tuple[str, ...] = tuple(c.value for c in ContentClass)


@dataclass(frozen=True)
class ContentProfile:
    """The measures the rule reads and the class they give (for tests and /sim/requests)."""

    tokens: int
    repetition: float
    code_share: float
    punctuation_share: float
    asks_for_code: bool
    content: ContentClass


def profile_tokens(tokens: Sequence[str]) -> ContentProfile:
    """The profile of content given as tokens (the server has them already)."""
    window = list(tokens[-WINDOW:])
    count = len(window)
    if count == 0:
        return ContentProfile(0, 0.0, 0.0, 0.0, False, ContentClass.PLAIN)
    bare = [token.strip() for token in window]
    grams = max(0, count - NGRAM + 1)
    distinct = len(set(zip(*(bare[i:] for i in range(NGRAM)), strict=False)))
    repetition = 1.0 - distinct / grams if grams else 0.0
    code = sum(1 for word in bare if word in CODE_SYMBOLS) + sum(
        1 for token, word in zip(window, bare, strict=True)
        if "\n" in token and word not in CODE_SYMBOLS and _INDENTED_LINE.search(token)
    )
    punctuation = sum(1 for word in bare if word in _PUNCTUATION)
    asks = _CODE_REQUEST.search("".join(window)) is not None
    code_share = code / count
    punctuation_share = punctuation / count
    if repetition >= REPETITIVE_SHARE:
        content = ContentClass.REPETITIVE
    elif code_share >= CODE_SHARE or asks:
        content = ContentClass.CODE
    elif punctuation_share >= PROSE_SHARE:
        content = ContentClass.PROSE
    else:
        content = ContentClass.PLAIN
    return ContentProfile(count, repetition, code_share, punctuation_share, asks, content)


def profile_text(text: str) -> ContentProfile:
    """The profile of a /generate text, or of message texts joined as the server reads them."""
    return profile_tokens(tokenize(text))


def classify(text: str) -> ContentClass:
    return profile_text(text).content


def classify_turns(texts: Iterable[str]) -> ContentClass:
    """The class of a chat request from its message texts in order, as the server reads it."""
    return profile_tokens([token for text in texts for token in tokenize(text)]).content
