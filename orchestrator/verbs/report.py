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
from orchestrator.store import Store, StoreError, SweepNotFound
from orchestrator.verbs.apiclient import (
    DaemonUnreachable,
    add_socket_argument,
    call,
    socket_path,
    sweep_url,
)
from orchestrator.verbs.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    BadInput,
    add_db_argument,
    db_path,
    missing_store,
    write_atomically,
)

_SUFFIXES: dict[str, ReportFormat] = {".md": "md", ".html": "html", ".htm": "html", ".csv": "csv"}
_SUFFIXES[".json"] = "json"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "sweeps", nargs="+", metavar="SWEEP", help="sweep name or id; two or more compare"
    )
    source = parser.add_mutually_exclusive_group()
    add_db_argument(source)
    add_socket_argument(source)
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
    path = db_path(args.db)
    missing = missing_store(path)
    if missing is not None:
        raise FileNotFoundError(missing)
    async with await Store.open(path) as store:
        refs: list[str | int] = list(args.sweeps)
        return await render_report(store, refs, fmt, include_requests=args.requests)


class _DaemonRefused(Exception):
    """The daemon answered with an error (a sweep it does not know: exit 2)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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
    response = call(socket_path(args.socket), "GET", sweep_url(first, "/report"), params=params)
    if not response.ok:
        raise _DaemonRefused(response.error, response.exit_code())
    return response.text


def run(args: argparse.Namespace) -> int:
    fmt = _format(args)
    try:
        text = _from_daemon(args, fmt) if args.socket else asyncio.run(_render(args, fmt))
    except (SweepNotFound, BadInput) as error:
        print(f"report: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (FileNotFoundError, StoreError) as error:
        print(f"report: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except _DaemonRefused as error:
        print(f"report: {error}", file=sys.stderr)
        return error.exit_code
    except DaemonUnreachable as error:
        print(f"report: {error}", file=sys.stderr)
        return EXIT_FAILED
    if args.output:
        output = Path(args.output).expanduser()
        write_atomically(output, text)
        print(f"report: wrote {output} ({fmt})", file=sys.stderr)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return EXIT_OK
