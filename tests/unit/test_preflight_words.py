"""How a failure the preflight found reads: never as something that happened at startup, since
the host's own parser refused the config before any restart (issue 22, item 9). The words name
no engine: they come from the one table of causes (orchestrator/causes.py)."""

from __future__ import annotations

from orchestrator.engines.base import ParseVerdict
from orchestrator.evidence import RefusalEvidence
from orchestrator.verbs.outcome import failure_words


def test_a_config_the_parser_refused_is_not_reported_as_refused_at_startup() -> None:
    verdict = ParseVerdict(False, "resolution", "ValueError: Unknown speculative algorithm: FOO")
    words = failure_words(verdict.cause, RefusalEvidence.of(verdict).to_json())
    assert "at startup" not in words
    assert words == (
        "the host's own parser refused the config (found by the preflight, before any "
        "restart): ValueError: Unknown speculative algorithm: FOO"
    )


def test_a_bad_value_the_parser_refused_names_the_preflight_too() -> None:
    error = "launch_server.py: error: argument --speculative-num-draft-tokens: invalid int value"
    verdict = ParseVerdict(False, "argparse", error)
    words = failure_words(verdict.cause, RefusalEvidence.of(verdict).to_json())
    assert words.endswith(f"before any restart): {error}")


def test_a_refusal_at_startup_still_says_so() -> None:
    words = failure_words("invalid-config", {"message": "ValueError: window < block"})
    assert words == "the server refused the config at startup: ValueError: window < block"
