"""When two SGLang command lines run the same server: how SGLang reads a value, and which flags
it replaces under the rest of the command line (FACTS.md), so a search never pays a restart for
a config SGLang resolves like one it already ran.

DFLASH forces ``--speculative-num-steps`` and ``--speculative-eagle-topk`` to 1; EAGLE with
top-k 1 forces the draft tokens to steps + 1. The running server's config check reads the same
rules from ``/server_info``'s side (:func:`orchestrator.engines.sglang.engine.check_server_config`).
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.engines.shared import normal_scalar_word

ALGORITHM_FLAG = "--speculative-algorithm"
STEPS_FLAG = "--speculative-num-steps"
TOPK_FLAG = "--speculative-eagle-topk"
DRAFT_TOKENS_FLAG = "--speculative-num-draft-tokens"
_REPORTED_AS = {"NEXTN": "EAGLE"}


def normal_word(word: str, flag: str | None) -> str:
    """A command-line value as SGLang reads it: numbers by value, booleans in one spelling, the
    algorithm upper-cased under the name the server reports (NEXTN is EAGLE)."""
    text = word.strip()
    if flag == ALGORITHM_FLAG:
        upper = text.upper()
        return _REPORTED_AS.get(upper, upper)
    return normal_scalar_word(text)


def forced_flags(values: Mapping[str, str | None]) -> frozenset[str]:
    """Flags whose value SGLang replaces under the rest of this command line (``values``: each
    flag's value as :func:`normal_word` reads it)."""
    if values.get(ALGORITHM_FLAG) == "DFLASH":
        return frozenset({STEPS_FLAG, TOPK_FLAG})
    if values.get(TOPK_FLAG) == "1" and values.get(STEPS_FLAG) is not None:
        return frozenset({DRAFT_TOKENS_FLAG})
    return frozenset()


__all__ = ["forced_flags", "normal_word"]
