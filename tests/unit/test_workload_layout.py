"""The units axis of a sample line (pure): cuts keep the text's own spacing, a long request
keeps its newest turns and the start of its question, a short one is padded with whole
turns of other lines placed before its own."""

from __future__ import annotations

from orchestrator.bench.workloads.sample import SampleRequest
from orchestrator.bench.workloads.source import _Line, _spread, cut, units, with_nonce
from orchestrator.engines.base import ChatMessage

CODE = "def f(x):\n    return x + 1\n"


def _request(line: int, *turns: tuple[str, str], reply: str | None = None) -> SampleRequest:
    return SampleRequest(tuple(ChatMessage(r, c) for r, c in turns), None, line, reply)


def test_a_cut_is_a_prefix_of_whole_units_with_its_spacing() -> None:
    assert units(CODE) == 11  # def f ( x ) : return x + 1, and the trailing newline
    assert cut(CODE, units(CODE)) == CODE
    assert cut(CODE, 7) == "def f(x):\n    return"
    assert cut(CODE, 0) == ""


def test_a_long_request_keeps_its_system_prompt_and_the_start_of_its_last_turn() -> None:
    request = _request(1, ("system", "Be brief."), ("user", "old question"),
                       ("assistant", "old answer"), ("user", "Explain this code: " + CODE))
    line = _Line(request, [], cap=1000)
    layout = line.layout(5)
    assert layout.messages == (ChatMessage("system", "Be brief."),
                               ChatMessage("user", "Explain this code: def"))
    assert layout.method == "trimmed"
    assert line.features(5) == (2, units("Be brief.") + 5 + 5)  # + the nonce's five words


def test_a_short_request_is_padded_with_whole_turns_of_other_lines_before_its_own() -> None:
    own = _request(1, ("user", "Why?"))
    other = _request(2, ("user", "Name a prime."), reply="Seven is prime.")
    line = _Line(own, [other], cap=20)
    taken = units("Why?") + units("Name a prime.") + 2
    layout = line.layout(taken)
    # The oldest exchange opens with its user turn; the cut falls in its answer.
    assert layout.messages == (ChatMessage("user", "Name a prime."),
                               ChatMessage("assistant", "Seven is"),
                               ChatMessage("user", "Why?"))
    assert layout.method == "padded-turns"
    assert line.features(taken) == (3, taken + 5)
    # the first unit of a turn taken after a whole one: where a template's jump is shaved
    assert line.opened(units("Why?") + 1) == (1, units("Name a prime."))
    assert line.opened(taken) is None
    shaved = line.layout(taken, shave=1)
    assert shaved.messages[0] == ChatMessage("user", "Name a prime")


def test_turns_of_one_role_next_to_each_other_are_one_message() -> None:
    line = _Line(_request(1, ("user", "Why?")), [_request(2, ("user", "Name a prime."))], cap=20)
    taken = units("Why?") + units("Name a prime.")
    assert line.layout(taken).messages == (ChatMessage("user", "Name a prime.\n\nWhy?"),)
    assert line.features(taken) == (1, taken + 5)


def test_the_nonce_leads_the_first_message_and_distinct_lines_spread_evenly() -> None:
    messages = with_nonce((ChatMessage("system", "S"), ChatMessage("user", "U")), 7)
    assert messages[0].content.endswith("\n\nS") and len(messages[0].content.split()) == 6
    assert messages[1] == ChatMessage("user", "U")
    assert _spread(3, 5) == [0, 1, 2]
    assert _spread(10, 4) == [0, 2, 5, 7]
