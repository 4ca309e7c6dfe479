"""Render sweep results as Markdown, HTML (with plots), CSV or JSON; two sweeps side by side.

From a store file (``--db``, else the default store, where ``run`` writes), or rendered by the
daemon from its store (``--socket``), as ``results`` reads either."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import cast

from orchestrator.report import FORMATS, ReportFormat, render_report
from orchestrator.verbs.apiclient import daemon_get, sweep_url
from orchestrator.verbs.common import EXIT_OK, write_atomically
from orchestrator.verbs.source import add_source_arguments, open_store, read_or_exit

_SUFFIXES: dict[str, ReportFormat] = {".md": "md", ".html": "html", ".htm": "html", ".csv": "csv"}
_SUFFIXES[".json"] = "json"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sweeps", nargs="+", metavar="SWEEP", help="sweep name or id; two or more compare"
    )
    add_source_arguments(parser)
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="md (default), html, csv or json; default from -o's suffix when given",
    )
    parser.add_argument("-o", "--output", metavar="PATH", help="write here instead of stdout")
    parser.add_argument(
        "--requests", action="store_true", help="JSON: include every request's record"
    )


def _format(args: argparse.Namespace) -> ReportFormat:
    if args.format:
        return cast(ReportFormat, args.format)
    if args.output:
        return _SUFFIXES.get(Path(args.output).suffix.lower(), "md")
    return "md"


async def _render(args: argparse.Namespace, fmt: ReportFormat) -> str:
    async with open_store(args.db) as store:
        refs: list[str | int] = list(args.sweeps)
        return await render_report(store, refs, fmt, include_requests=args.requests)


def _from_daemon(args: argparse.Namespace, fmt: ReportFormat) -> str:
    """The report as the daemon renders it from its store (``GET /sweeps/{ref}/report``)."""
    first, *others = args.sweeps
    for ref in others:
        sweep_url(ref)  # a ref that is no name or id: the user's mistake
    params: dict[str, str] = {"format": fmt}
    if others:
        params["with"] = ",".join(others)
    if args.requests:
        params["requests"] = "1"
    return daemon_get(args.socket, first, "/report", params=params).text


def _read(args: argparse.Namespace, fmt: ReportFormat) -> str:
    return _from_daemon(args, fmt) if args.socket else asyncio.run(_render(args, fmt))


def run(args: argparse.Namespace) -> int:
    fmt = _format(args)
    text = read_or_exit("report", lambda: _read(args, fmt))
    if isinstance(text, int):
        return text
    if args.output:
        output = Path(args.output).expanduser()
        write_atomically(output, text)
        print(f"report: wrote {output} ({fmt})", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return EXIT_OK
