"""How numbers and times read in a report: one place, so Markdown and HTML agree."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from orchestrator.types import SYNTHETIC_WORKLOAD, MatrixCell, OfferedLoad

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


def count(value: float | None) -> str:
    """A count of tokens or requests, rounded: ``412``."""
    return MISSING if value is None else f"{value:,.0f}"


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


def cell_label(cell: MatrixCell) -> str:
    """``4096/c32``, ``4096/8 req/s``; ``chat 4096/c32`` on a workload other than synthetic."""
    name = f"{cell.context}/{cell.load}"
    return name if cell.workload == SYNTHETIC_WORKLOAD else f"{cell.workload} {name}"


def measured_cell_label(cell: MatrixCell, measured: OfferedLoad | None) -> str:
    """:func:`cell_label` beside measured values: ``4096/c32``, ``2048/4 req/s (5.38 offered,
    5.31 sent)``, or ``2048/nominal 4 req/s`` where no point measured the schedule
    (:meth:`~orchestrator.types.MatrixCell.measured_load`)."""
    name = f"{cell.context}/{cell.measured_load(measured)}"
    return name if cell.workload == SYNTHETIC_WORKLOAD else f"{cell.workload} {name}"


def percent(value: float | None) -> str:
    """A relative difference: ``4.0%``, ``-0.6%``; no decimals from 10 % up."""
    if value is None:
        return MISSING
    points = value * 100.0
    return f"{points:.0f}%" if abs(points) >= 10 else f"{points:.1f}%"


def interval(ci: tuple[float, float] | None, number: Callable[[float], str]) -> str:
    """`` [lo, hi]`` (leading space) with each bound written by ``number``; ``""`` without
    one, so a value without an interval reads as a bare value, never as a fake one."""
    if ci is None:
        return ""
    return f" [{number(ci[0])}, {number(ci[1])}]"


def factor(value: float) -> str:
    """A ratio's bare number (an interval's bound): ``2.31``."""
    return f"{value:.2f}"


def metric_number(metric: str, value: float | None) -> str:
    """A stored point metric's number in the unit :func:`metric_unit` names."""
    if value is None:
        return MISSING
    if metric.endswith("tok_s") or metric in _REQUEST_RATES:
        return rate(value)
    if metric in _SHARES:
        return f"{value * 100:.0f}%"
    if metric.endswith("_s"):
        return ms(value)
    return f"{value:.3g}"


_REQUEST_RATES = frozenset({"goodput", "request_s", "achieved_rate"})
_SHARES = frozenset({"coding_pass_rate", "goodput_fraction"})


def metric_unit(metric: str) -> str:
    if metric.endswith("tok_s"):
        return " tok/s"
    if metric in _REQUEST_RATES:
        return " req/s"
    if metric in _SHARES:
        return ""
    if metric.endswith("_s"):
        return " ms"
    return ""


def metric(metric_name: str, value: float | None) -> str:
    """``1,234 tok/s``, ``412 ms``: a metric's value with its unit."""
    if value is None:
        return MISSING
    return metric_number(metric_name, value) + metric_unit(metric_name)
