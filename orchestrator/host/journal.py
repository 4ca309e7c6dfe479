"""journald reads for one unit: by cursor, by invocation, and a follower that survives reconnects.

``journalctl -o json`` is not plain strings (FACTS: journald): a value with non-UTF-8 or
non-printable bytes (ANSI colours, ``\\r``) is an array of byte values, a repeated field is an
array, a value over 4096 bytes is ``null`` unless ``--all``, and a line over 48 KiB is split into
entries marked ``_LINE_BREAK=line-max``. All of that is decoded here, once.

Filtering one run: ``journalctl -u UNIT _SYSTEMD_INVOCATION_ID=X + INVOCATION_ID=X``. journalctl
adds ``-u``'s matches as their own group and closes it with a conjunction before the free
matches (``add_units`` then ``add_matches`` in journalctl.c), so the result is
``(unit) AND (_SYSTEMD_INVOCATION_ID=X OR INVOCATION_ID=X)``: the service's own lines
(``_SYSTEMD_INVOCATION_ID``) and systemd's lines about it (``INVOCATION_ID``), of that unit only.
Where the field is missing (short-lived services, systemd not PID 1), :func:`filter_invocation`
falls back to the run's time window and the unit's PIDs.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.host.errors import HostError
from orchestrator.host.transport import Transport, TransportError
from orchestrator.log import get_logger

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
_INVOCATION_FIELDS = ("_SYSTEMD_INVOCATION_ID", "INVOCATION_ID", "USER_INVOCATION_ID")
_UNIT_FIELDS = ("_SYSTEMD_UNIT", "UNIT", "_SYSTEMD_USER_UNIT", "USER_UNIT")

JournalValue = str | list[str] | None
"""One journal field's value as text: a list where the field repeats, None where journalctl
wrote null (not a log line's parsed field: that is :data:`orchestrator.engines.base.FieldValue`)."""


class JournalError(HostError):
    """journalctl failed (e.g. a malformed cursor or a corrupt journal file: rc 1); carries its
    exit status and stderr (-1: the follower's stream failed again and again)."""

    def __init__(self, unit: str, exit_status: int, stderr: str) -> None:
        super().__init__(f"journalctl for {unit} exited {exit_status}: {stderr.strip()[:400]}")
        self.unit = unit
        self.exit_status = exit_status
        self.stderr = stderr

    @property
    def evidence(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "command": {"argv": ["journalctl"], "exit_status": self.exit_status,
                        "stderr": self.stderr.strip()[-400:]},
        }


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journal entry; ``message`` is None when journald sent ``null`` (over 4096 bytes
    without ``--all``), then ``message_truncated`` is True."""

    cursor: str
    realtime_us: int
    pid: int | None
    message: str | None
    invocation_id: str | None
    unit: str | None
    raw: Mapping[str, JournalValue]
    message_truncated: bool = False
    line_break: str | None = None


def _decode_value(value: Any) -> JournalValue:
    """A JSON field value -> text: byte arrays decoded (replacing bad UTF-8), arrays of
    values (a repeated field) -> list of texts."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        if all(isinstance(item, int) for item in value):
            return bytes(value).decode("utf-8", errors="replace")
        texts = []
        for item in value:
            decoded = _decode_value(item)
            if isinstance(decoded, str):
                texts.append(decoded)
        return texts
    return str(value)


def _first(value: JournalValue) -> str | None:
    if isinstance(value, list):
        return value[0] if value else None
    return value


def clean_message(text: str) -> str:
    """Strip ANSI escapes and line ends; keep what a terminal would finally show after ``\\r``."""
    text = _ANSI.sub("", text).rstrip("\r\n")
    return text.rsplit("\r", 1)[-1] if "\r" in text else text


def decode_entry(obj: Mapping[str, Any]) -> JournalEntry:
    """One ``journalctl -o json`` object -> :class:`JournalEntry`."""
    raw = {key: _decode_value(value) for key, value in obj.items()}
    message_value = raw.get("MESSAGE")
    if isinstance(message_value, list):
        message: str | None = "\n".join(message_value)
    else:
        message = message_value
    pid_text = _first(raw.get("_PID"))
    realtime = _first(raw.get("__REALTIME_TIMESTAMP"))
    return JournalEntry(
        cursor=_first(raw.get("__CURSOR")) or "",
        realtime_us=int(realtime) if realtime and realtime.isdigit() else 0,
        pid=int(pid_text) if pid_text and pid_text.isdigit() else None,
        message=None if message is None else clean_message(message),
        invocation_id=next((v for f in _INVOCATION_FIELDS if (v := _first(raw.get(f)))), None),
        unit=next((v for f in _UNIT_FIELDS if (v := _first(raw.get(f)))), None),
        raw=raw,
        message_truncated="MESSAGE" in obj and obj["MESSAGE"] is None,
        line_break=_first(raw.get("_LINE_BREAK")),
    )


def _joins(held: JournalEntry, entry: JournalEntry) -> bool:
    return held.line_break == "line-max" and held.pid is not None and held.pid == entry.pid


def _join(held: JournalEntry, entry: JournalEntry) -> JournalEntry:
    """A split line's parts as one entry: text joined, the cursor of the LAST part (so a
    resume after it repeats nothing), the timestamp of the first."""
    return replace(
        entry,
        realtime_us=held.realtime_us,
        message=(held.message or "") + (entry.message or ""),
        message_truncated=held.message_truncated or entry.message_truncated,
    )


def join_split_lines(entries: Iterable[JournalEntry]) -> list[JournalEntry]:
    """Rejoin lines journald split at 48 KiB (``_LINE_BREAK=line-max``, same PID, consecutive)."""
    joined: list[JournalEntry] = []
    for entry in entries:
        if joined and _joins(joined[-1], entry):
            joined[-1] = _join(joined[-1], entry)
        else:
            joined.append(entry)
    return joined


def parse_json_lines(lines: Iterable[bytes | str]) -> list[JournalEntry]:
    """journalctl's JSON output, one object a line, blank lines ignored, split lines joined."""
    return join_split_lines(decode_entry(json.loads(line)) for line in lines if line.strip())


def journalctl_argv(
    unit: str,
    *,
    after_cursor: str | None = None,
    invocation_id: str | None = None,
    follow: bool = False,
    lines: int | None = None,
    since: float | str | None = None,
) -> list[str]:
    """The journalctl command for a unit's entries (see the module docstring on matches).

    ``since`` is an epoch (seconds) or journalctl's own syntax; never RFC 3339.
    """
    if unit.startswith("-") or "=" in unit:
        raise ValueError(f"not a unit name: {unit!r}")
    argv = ["journalctl", "--all", "-o", "json", "--no-pager", "-q", "-u", unit]
    if after_cursor is not None:
        argv.append(f"--after-cursor={after_cursor}")
    if since is not None:
        argv.append(
            f"--since=@{since:.6f}" if isinstance(since, float | int) else f"--since={since}"
        )
    if lines is not None:
        argv.append(f"--lines={lines}")
    if follow:
        argv.append("--follow")
    if invocation_id is not None:
        if not re.fullmatch(r"[0-9a-f]{32}", invocation_id):
            raise ValueError(f"not an invocation id: {invocation_id!r}")
        argv += [f"_SYSTEMD_INVOCATION_ID={invocation_id}", "+", f"INVOCATION_ID={invocation_id}"]
    return argv


@dataclass(frozen=True, slots=True)
class RunWindow:
    """The realtime span (microseconds) of one run, for entries that lack an invocation id."""

    start_us: int
    end_us: int | None = None

    def __contains__(self, realtime_us: int) -> bool:
        return realtime_us >= self.start_us and (self.end_us is None or realtime_us <= self.end_us)


def filter_invocation(
    entries: Iterable[JournalEntry],
    invocation_id: str,
    pids: Collection[int],
    window: RunWindow,
) -> list[JournalEntry]:
    """The entries of one run: those tagged with its invocation id, plus untagged entries in
    its time window from its PIDs (any PID when ``pids`` is empty). Entries tagged with another
    invocation are never taken."""
    chosen = []
    for entry in entries:
        if entry.invocation_id is not None:
            if entry.invocation_id == invocation_id:
                chosen.append(entry)
        elif entry.realtime_us in window and (not pids or entry.pid in pids):
            chosen.append(entry)
    return chosen


async def read_entries(
    transport: Transport,
    unit: str,
    after_cursor: str | None = None,
    *,
    invocation_id: str | None = None,
    lines: int | None = None,
    since: float | str | None = None,
    timeout: float = 30.0,
) -> list[JournalEntry]:
    """A unit's entries after ``after_cursor`` (all, or the last ``lines``), oldest first."""
    argv = journalctl_argv(
        unit, after_cursor=after_cursor, invocation_id=invocation_id, lines=lines, since=since
    )
    result = await transport.run(argv, timeout=timeout, privileged=True, idempotent=True)
    if not result.ok:
        raise JournalError(unit, result.exit_status, result.stderr_text())
    return parse_json_lines(result.stdout.splitlines())


class JournalFollower:
    """A unit's new entries from one long-lived ``journalctl -f``, surviving reconnects.

    Each entry is yielded once: after a stream failure it resumes with ``--after-cursor`` of the
    last entry it yielded (``last_cursor``). A split line's first part is held until its
    continuation arrives; a reconnect drops the held part, which the resume reads again.
    Without a start cursor it follows from now (``--lines=0``).
    """

    def __init__(
        self,
        transport: Transport,
        unit: str,
        start_cursor: str | None,
        *,
        invocation_id: str | None = None,
        reconnect_delay: float = 0.5,
        max_failures: int = 20,
    ) -> None:
        self._transport = transport
        self._unit = unit
        self._invocation_id = invocation_id
        self._reconnect_delay = reconnect_delay
        self._max_failures = max_failures
        self.last_cursor = start_cursor
        self.reconnects = 0
        self._log = get_logger(host=transport.name, unit=unit)

    def _argv(self) -> list[str]:
        return journalctl_argv(
            self._unit,
            after_cursor=self.last_cursor,
            invocation_id=self._invocation_id,
            follow=True,
            lines=0 if self.last_cursor is None else None,
        )

    def __aiter__(self) -> AsyncGenerator[JournalEntry, None]:
        """A fresh generator; close it (``contextlib.aclosing``) to stop the stream at once."""
        return self._entries()

    async def _entries(self) -> AsyncGenerator[JournalEntry, None]:
        failures = 0
        while True:
            held: JournalEntry | None = None
            reason = "stream ended"
            try:
                async with self._transport.stream(self._argv(), privileged=True) as lines:
                    async for line in lines:
                        if not line.strip():
                            continue
                        try:
                            entry = decode_entry(json.loads(line))
                        except ValueError:
                            self._log.warning("journal.bad_line", line=line[:200])
                            continue
                        failures = 0
                        if held is not None and _joins(held, entry):
                            entry = _join(held, entry)
                            held = None
                        if held is not None:
                            self.last_cursor = held.cursor
                            yield held
                            held = None
                        if entry.line_break == "line-max":
                            held = entry
                            continue
                        self.last_cursor = entry.cursor
                        yield entry
            except (TransportError, OSError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            failures += 1
            if failures > self._max_failures:
                raise JournalError(self._unit, -1, f"follow failed {failures} times: {reason}")
            self.reconnects += 1
            self._log.warning(
                "journal.reconnect",
                reason=reason,
                after_cursor=self.last_cursor,
                attempt=failures,
            )
            await asyncio.sleep(self._reconnect_delay)


def messages(entries: Sequence[JournalEntry]) -> list[str]:
    """The entries' message texts (truncated ``null`` messages skipped)."""
    return [entry.message for entry in entries if entry.message is not None]
