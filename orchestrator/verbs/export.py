"""Write a sweep's measured points in a format other tools read: llm-d's Benchmark Report.

One JSON document per throughput point of each done attempt, into ``--output DIR``, from a
store (``--db``, else the default store, where ``run`` writes) or from the daemon's
(``--socket``), as ``report`` reads either. What goes where: docs/operator-guide.md,
"Exporting results"."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from orchestrator.export.benchmark_report import BenchmarkReports, benchmark_reports
from orchestrator.store import SweepResults
from orchestrator.verbs.apiclient import DaemonError, daemon_get
from orchestrator.verbs.common import EXIT_FAILED, EXIT_OK, write_atomically
from orchestrator.verbs.source import add_source_arguments, open_store, read_or_exit

FORMATS = ("benchmark-report",)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="SWEEP", help="a sweep name (its latest run) or id")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        required=True,
        help="benchmark-report: llm-d's Benchmark Report v0.2.1, one JSON file per point",
    )
    add_source_arguments(parser)
    parser.add_argument(
        "--output",
        metavar="DIR",
        help="write the files here (created if missing; default ./SWEEP-ID-benchmark-report)",
    )


async def _from_store(value: str | None, ref: str) -> SweepResults:
    async with open_store(value) as store:
        return await store.results(ref)


def _from_daemon(socket: str | None, ref: str) -> SweepResults:
    """The results as the daemon reads them from its store (``GET /sweeps/{ref}/results``)."""
    response = daemon_get(socket, ref, "/results")
    try:
        return SweepResults.from_json(response.document)
    except (KeyError, TypeError, ValueError) as error:
        raise DaemonError(
            f"the daemon's answer is no results document ({error})", EXIT_FAILED
        ) from error


def write_reports(exported: BenchmarkReports, directory: Path) -> None:
    """Each document in its own file, written whole or not at all (a reader that watches the
    directory never reads half a report)."""
    for report in exported.reports:
        text = json.dumps(report.document, indent=2, sort_keys=False) + "\n"
        write_atomically(directory / report.filename, text)


def _summary(exported: BenchmarkReports, directory: Path) -> str:
    count = len(exported.reports)
    words = f"export: wrote {count} benchmark report{'s' * (count != 1)} to {directory}"
    if not count:
        words = "export: no measured throughput point of a done attempt: nothing written"
    if exported.skipped_points:
        words += (
            f" ({exported.skipped_points} point(s) of attempts that did not finish left out: "
            "no record says which server measured them)"
        )
    return words


def _read(args: argparse.Namespace) -> SweepResults:
    if args.socket:
        return _from_daemon(args.socket, args.sweep)
    return asyncio.run(_from_store(args.db, args.sweep))


def run(args: argparse.Namespace) -> int:
    results = read_or_exit("export", lambda: _read(args))
    if isinstance(results, int):
        return results
    exported = benchmark_reports(results)
    directory = Path(args.output or f"{results.sweep}-{results.id}-benchmark-report").expanduser()
    try:
        write_reports(exported, directory)
    except OSError as error:
        print(f"export: {directory}: {error.strerror or error}", file=sys.stderr)
        return EXIT_FAILED
    print(_summary(exported, directory), file=sys.stderr)
    return EXIT_OK
