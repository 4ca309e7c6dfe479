"""journalctl JSON decoding, the command line, and the per-invocation filter."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.host.journal import (
    RunWindow,
    decode_entry,
    filter_invocation,
    journalctl_argv,
    parse_json_lines,
)

INV = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"


def _entry(n: int, message: Any, **extra: Any) -> dict[str, Any]:
    fields = {
        "__CURSOR": f"s=abc;i={n:x};b=boot;m=1;t=2;x=3",
        "__REALTIME_TIMESTAMP": str(1_700_000_000_000_000 + n),
        "__MONOTONIC_TIMESTAMP": str(n),
        "_PID": "4242",
        "_SYSTEMD_UNIT": "sglang.service",
        "MESSAGE": message,
    }
    fields.update(extra)
    return fields


def test_plain_entry() -> None:
    entry = decode_entry(_entry(1, "[2026-10-30 12:00:00] hello", _SYSTEMD_INVOCATION_ID=INV))
    assert entry.cursor.startswith("s=abc;i=1")
    assert entry.realtime_us == 1_700_000_000_000_001
    assert entry.pid == 4242 and entry.unit == "sglang.service"
    assert entry.message == "[2026-10-30 12:00:00] hello"
    assert entry.invocation_id == INV and not entry.message_truncated


def test_byte_array_message_with_ansi_and_bad_utf8() -> None:
    raw = list(b"\x1b[32mINFO\x1b[0m Decode batch, accept len: 2.00 \xff")
    entry = decode_entry(_entry(2, raw))
    assert entry.message == "INFO Decode batch, accept len: 2.00 \ufffd"


def test_carriage_return_progress_keeps_the_last_frame() -> None:
    entry = decode_entry(_entry(3, list(b"Loading  10%\rLoading  90%\rLoading 100%\r")))
    assert entry.message == "Loading 100%"


def test_null_message_is_flagged() -> None:
    entry = decode_entry(_entry(4, None))
    assert entry.message is None and entry.message_truncated


def test_repeated_fields_are_lists() -> None:
    entry = decode_entry(
        _entry(5, "x", _PID=["4242", "4243"], CODE_FILE=["a.py", list(b"b\x1b[1m.py")])
    )
    assert entry.pid == 4242
    assert entry.raw["CODE_FILE"] == ["a.py", "b\x1b[1m.py"]


def test_invocation_from_systemd_lines_and_user_manager() -> None:
    assert decode_entry(_entry(6, "Started", INVOCATION_ID=INV)).invocation_id == INV
    user = decode_entry(_entry(7, "Started", _SYSTEMD_UNIT=None, USER_INVOCATION_ID=INV))
    assert user.invocation_id == INV


def test_split_lines_are_joined_with_the_last_cursor() -> None:
    first = _entry(10, "A" * 10, _LINE_BREAK="line-max")
    second = _entry(11, "B" * 5)
    other_pid = _entry(12, "C", _PID="99")
    lines = [json.dumps(x).encode() for x in (first, second, other_pid)] + [b""]
    entries = parse_json_lines(lines)
    assert [e.message for e in entries] == ["A" * 10 + "B" * 5, "C"]
    assert entries[0].cursor == second["__CURSOR"]
    assert entries[0].realtime_us == int(first["__REALTIME_TIMESTAMP"])


def test_split_line_not_joined_across_pids() -> None:
    first = _entry(10, "A", _LINE_BREAK="line-max")
    other = _entry(11, "B", _PID="1")
    assert [e.message for e in parse_json_lines([json.dumps(first), json.dumps(other)])] == [
        "A",
        "B",
    ]


def test_argv() -> None:
    assert journalctl_argv("sglang.service") == [
        "journalctl", "--all", "-o", "json", "--no-pager", "-q", "-u", "sglang.service",
    ]  # fmt: skip
    argv = journalctl_argv(
        "sglang.service", after_cursor="s=1;i=2", invocation_id=INV, follow=True, since=1.5
    )
    assert "--after-cursor=s=1;i=2" in argv and "--follow" in argv
    assert "--since=@1.500000" in argv
    assert argv[-3:] == [f"_SYSTEMD_INVOCATION_ID={INV}", "+", f"INVOCATION_ID={INV}"]
    assert "--lines=0" in journalctl_argv("u.service", follow=True, lines=0)
    for bad in ("-x", "a=b"):
        with pytest.raises(ValueError):
            journalctl_argv(bad)
    with pytest.raises(ValueError):
        journalctl_argv("u.service", invocation_id="not-hex")


def test_filter_invocation_with_fallback() -> None:
    entries = [
        decode_entry(x)
        for x in (
            _entry(1, "old run", _SYSTEMD_INVOCATION_ID=OTHER),
            _entry(2, "tagged", _SYSTEMD_INVOCATION_ID=INV),
            _entry(3, "untagged ours"),
            _entry(4, "untagged other pid", _PID="7"),
            _entry(900, "untagged after window"),
            _entry(5, "systemd about us", INVOCATION_ID=INV, _PID="1"),
        )
    ]
    window = RunWindow(1_700_000_000_000_002, 1_700_000_000_000_100)
    chosen = filter_invocation(entries, INV, {4242}, window)
    assert [e.message for e in chosen] == ["tagged", "untagged ours", "systemd about us"]
    any_pid = filter_invocation(entries, INV, set(), window)
    assert "untagged other pid" in [e.message for e in any_pid]
