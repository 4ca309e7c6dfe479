"""The log format: our events and the libraries' stdlib records come out as the same JSON
lines, secrets redacted in both, and aiohttp's malformed-request tracebacks as one line; a
terminal gets warnings only, a file or a pipe every event.

Each case runs in a fresh interpreter: configure_logging sets process-wide state."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import textwrap
from pathlib import Path


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


_TWO_EVENTS = """
    import logging, sys
    from orchestrator.log import configure_logging, get_logger
    configure_logging("info", log_file=sys.argv[1] if len(sys.argv) > 1 else None)
    log = get_logger(sweep="night", host="gpu-01")
    log.info("unit.stopped", unit="sglang.service")
    log.warning("host.set_aside", reason="unreachable")
    logging.getLogger("asyncssh").warning("auth failed")
"""


def test_a_terminal_shows_only_warnings_while_the_log_file_keeps_every_event(
    tmp_path: Path,
) -> None:
    """On a TTY the live display says what runs; the log there is warnings and failures only,
    and a --log-file still gets every event as JSON (the demo printed ~280 lines before)."""
    log_file = tmp_path / "run.log"
    primary, secondary = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_TWO_EVENTS), str(log_file)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=secondary,
            timeout=60,
            check=True,
        )
        assert done.returncode == 0
        os.close(secondary)
        secondary = -1
        terminal = _read_all(primary)
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    assert "host.set_aside" in terminal and "auth failed" in terminal
    assert "unit.stopped" not in terminal
    assert not terminal.lstrip().startswith("{")  # for a person, not JSON
    events = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [e["event"] for e in events] == ["unit.stopped", "host.set_aside", "auth failed"]
    assert events[0]["sweep"] == "night" and events[0]["host"] == "gpu-01"


def test_off_a_terminal_every_event_goes_to_stderr_as_json() -> None:
    lines = _stderr_lines(_TWO_EVENTS)
    assert [line["event"] for line in lines] == ["unit.stopped", "host.set_aside", "auth failed"]


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the other side is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")
