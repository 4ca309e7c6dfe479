"""The log format: our events and the libraries' stdlib records come out as the same JSON
lines, secrets redacted in both, and aiohttp's malformed-request tracebacks as one line.

Each case runs in a fresh interpreter: configure_logging sets process-wide state."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _stderr_lines(script: str) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in done.stderr.splitlines()]


def test_library_records_share_the_format_and_the_redaction() -> None:
    lines = _stderr_lines(
        """
        import logging
        from orchestrator.log import configure_logging, get_logger
        configure_logging(json=True)
        configure_logging(json=True)  # again: still one handler, one line per record
        get_logger(host="h1").info("unit.stopped", api_token="s3cret-1")
        logging.getLogger("asyncssh").info("channel opened")  # below WARNING: dropped
        logging.getLogger("asyncssh").warning("auth with Bearer s3cret-2 failed")
        try:
            1 / 0
        except ZeroDivisionError:
            logging.getLogger("asyncio").error("Task exception was never retrieved",
                                               exc_info=True)
        """
    )
    assert [line["event"] for line in lines] == [
        "unit.stopped",
        "auth with Bearer [redacted] failed",
        "Task exception was never retrieved",
    ]
    assert lines[0]["api_token"] == "[redacted]" and lines[0]["host"] == "h1"
    assert lines[1]["level"] == "warning" and "timestamp" in lines[1]
    assert "ZeroDivisionError" in str(lines[2]["exception"])


def test_a_malformed_request_is_one_warning_without_traceback() -> None:
    (line,) = _stderr_lines(
        """
        import logging
        from aiohttp.http_exceptions import LineTooLong
        from orchestrator.log import configure_logging
        configure_logging(json=True)
        try:
            raise LineTooLong("header line", "8190", "70000")
        except LineTooLong:
            logging.getLogger("aiohttp.server").exception("Error handling request")
        """
    )
    assert line["event"] == "http.malformed_request" and line["level"] == "warning"
    assert str(line["error"]).startswith("LineTooLong: ")
    assert "exception" not in line
