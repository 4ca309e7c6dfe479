"""How numbers and times read in a report: one place, so Markdown and HTML agree."""

from __future__ import annotations

import datetime as dt

MISSING = "—"


def rate(value: float | None) -> str:
    """Tokens per second: no decimals from 100 up, one below."""
    if value is None:
        return MISSING
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"


def ms(seconds: float | None) -> str:
    if seconds is None:
        return MISSING
    value = seconds * 1000.0
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def seconds(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1f}"


def ratio(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}×"


def accept(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2f}"


def when(timestamp: float | None) -> str:
    """UTC, to the minute: reports are read in the morning by people in several zones."""
    if timestamp is None:
        return MISSING
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(start: float | None, end: float | None) -> str:
    if start is None or end is None:
        return MISSING
    total = max(int(end - start), 0)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"


def cell_name(context: int, concurrency: int) -> str:
    return f"{context}/c{concurrency}"
