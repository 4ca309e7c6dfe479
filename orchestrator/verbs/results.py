"""Show a sweep's results, from the daemon or straight from a store file (--db)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from orchestrator.answers import AnsweredResults, answered_from_text
from orchestrator.store import Store, StoreError, SweepNotFound, SweepResults, TrialOutcome
from orchestrator.verbs.apiclient import (
    DaemonUnreachable,
    add_socket_argument,
    call,
    socket_path,
    sweep_url,
)
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, BadInput, emit_json


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", help="a sweep name (its latest run) or id")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    source = parser.add_mutually_exclusive_group()
    add_socket_argument(source)
    source.add_argument("--db", metavar="PATH", help="read this store file instead of a daemon")


async def _from_store(path: str, ref: str) -> AnsweredResults:
    """The results with their answers, drawn from the sweep file stored with them."""
    async with await Store.open(path) as store:
        results = await store.results(ref)
        record = await store.get_sweep(results.id)
    return answered_from_text(results, record.yaml_text, f"sweep {record.name} (id {record.id})")


def headline(trial: TrialOutcome) -> str:
    """What one attempt measured: ``4 throughput, coding 3/4 pass``."""
    parts = []
    if trial.throughput:
        parts.append(f"{len(trial.throughput)} throughput")
    if trial.coding:
        passed = sum(1 for point in trial.coding if point.passed)
        parts.append(f"coding {passed}/{len(trial.coding)} pass")
    return ", ".join(parts) or "-"


def print_results(results: SweepResults, console: Console) -> None:
    """One row per attempt, each config named by its knob values."""
    table = Table(title=f"sweep {results.sweep} (id {results.id}): {results.state}")
    for column in ("config", "host", "attempt", "state", "cause", "points"):
        table.add_column(column, overflow="fold")
    for trial in results.trials:
        table.add_row(
            trial.label,
            trial.host,
            "-" if trial.attempt is None else str(trial.attempt),
            trial.state,
            trial.cause or "",
            headline(trial),
        )
    console.print(table)
    for host in results.hosts:
        if host.set_aside:
            console.print(f"{host.name} set aside: {host.set_aside}", markup=False)


def _decode(document: dict[str, Any]) -> SweepResults | None:
    try:
        return SweepResults.from_json(document)
    except (KeyError, TypeError, ValueError):
        return None


def run(args: argparse.Namespace) -> int:
    try:
        if args.db:
            document = asyncio.run(_from_store(args.db, args.sweep))
            if args.json:
                emit_json(document.to_json())
                return EXIT_OK
            results = document.results
        else:
            response = call(socket_path(args.socket), "GET", sweep_url(args.sweep, "/results"))
            if not response.ok:
                if args.json:
                    emit_json(response.document)
                print(f"results {args.sweep}: {response.error}", file=sys.stderr)
                return response.exit_code()
            if args.json:  # the daemon's document as it sent it (a newer one may add keys)
                emit_json(response.document)
                return EXIT_OK
            decoded = _decode(response.document)
            if decoded is None:
                print(
                    f"results {args.sweep}: the daemon's answer is no results document",
                    file=sys.stderr,
                )
                return EXIT_FAILED
            results = decoded
    except (BadInput, SweepNotFound) as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    except (DaemonUnreachable, StoreError) as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        emit_json(results.to_json())
    else:
        print_results(results, Console())
    return EXIT_OK
