"""Reports people read in the morning: Markdown, self-contained HTML with plots, CSV, JSON.

:func:`render_report` is the one entry point (the ``report`` verb, the daemon's API and the
demo call it): it reads one or more sweeps from the store and renders them in one format;
two or more sweeps are compared side by side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Literal, get_args

from orchestrator.report.export import render_csv, render_json
from orchestrator.report.html import render_html
from orchestrator.report.markdown import render_markdown
from orchestrator.report.model import SweepReport, load_report
from orchestrator.store import Store

ReportFormat = Literal["md", "html", "csv", "json"]
FORMATS: tuple[ReportFormat, ...] = get_args(ReportFormat)
MEDIA_TYPES: dict[ReportFormat, str] = {
    "md": "text/markdown; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "csv": "text/csv; charset=utf-8",
    "json": "application/json",
}


def render(
    reports: Sequence[SweepReport], fmt: ReportFormat, *, include_requests: bool = False
) -> str:
    """Render already loaded reports (pure)."""
    if not reports:
        raise ValueError("a report needs at least one sweep")
    if fmt == "md":
        return render_markdown(reports)
    if fmt == "html":
        return render_html(reports)
    if fmt == "csv":
        return render_csv(reports)
    if fmt == "json":
        return render_json(reports, include_requests=include_requests)
    raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")


async def render_report(
    store: Store,
    refs: Sequence[str | int],
    fmt: ReportFormat = "md",
    *,
    include_requests: bool = False,
) -> str:
    """Read the sweeps ``refs`` (names or ids) and render them; raises ``SweepNotFound``.

    Every format is text (UTF-8 when written); ``include_requests`` adds each point's
    per-request records to the JSON. Rendering (pure, seconds of CPU for a large HTML report)
    runs in a worker thread, so the daemon serving a report keeps its sweeps' loop responsive.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")
    reports = [
        await load_report(store, ref, include_requests=include_requests and fmt == "json")
        for ref in refs
    ]
    return await asyncio.to_thread(render, reports, fmt, include_requests=include_requests)


__all__ = [
    "FORMATS",
    "MEDIA_TYPES",
    "ReportFormat",
    "SweepReport",
    "load_report",
    "render",
    "render_report",
]
