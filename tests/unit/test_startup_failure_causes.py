"""Startup failures SGLang writes that were mislabelled: each line as real SGLang writes it."""

from __future__ import annotations

import pytest

from orchestrator.engines.sglang.engine import FailureEvent, classify_failure, parse_log_line


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        # argparse (allow_abbrev) on a prefix that matches several flags
        (
            "sglang serve: error: ambiguous option: --speculative-d could match "
            "--speculative-draft-model-path, --speculative-draft-model-revision",
            "bad-flag",
        ),
        # sglang.srt.utils wait_port_available: a ValueError, but a taken port
        (
            "ValueError: dist_init_port at 30233 is not available in 30 seconds. "
            "dist_init_port is used by a process already.",
            "port-in-use",
        ),
        # a failed assert while ServerArgs resolves its arguments
        (
            "AssertionError: tp_size must be divisible by number of nodes",
            "invalid-config",
        ),
        ("AssertionError", "invalid-config"),
    ],
)
def test_mislabelled_startup_failures(line: str, cause: str) -> None:
    event = parse_log_line(line)
    assert isinstance(event, FailureEvent), line
    assert event.cause == cause
    assert classify_failure(line) == (cause, event.matched)


def test_a_plain_value_error_is_still_invalid_config() -> None:
    assert classify_failure("ValueError: Unknown speculative algorithm name: FOO") == (
        "invalid-config",
        "ValueError: Unknown speculative algorithm name: FOO",
    )
