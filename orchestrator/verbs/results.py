"""Show a sweep's results, from the daemon or straight from a store file (--db)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from orchestrator.store import Store, StoreError, SweepNotFound
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


async def _from_store(path: str, ref: str) -> dict[str, Any]:
    async with await Store.open(path) as store:
        return await store.sweep_results(ref)


def _headline(points: list[dict[str, Any]]) -> str:
    throughput = [p for p in points if p["kind"] == "throughput"]
    coding = [p for p in points if p["kind"] == "coding"]
    parts = []
    if throughput:
        parts.append(f"{len(throughput)} throughput")
    if coding:
        passed = sum(1 for p in coding if p["metrics"].get("outcome") == "PASS")
        parts.append(f"coding {passed}/{len(coding)} pass")
    return ", ".join(parts) or "-"


def print_results(document: dict[str, Any], console: Console) -> None:
    table = Table(title=f"sweep {document['sweep']} (id {document['id']}): {document['state']}")
    for column in ("trial", "host", "attempt", "state", "cause", "points"):
        table.add_column(column, overflow="fold")
    for trial in document["trials"]:
        table.add_row(
            trial["key"],
            trial["host"],
            "-" if trial["attempt"] is None else str(trial["attempt"]),
            trial["state"],
            trial["cause"] or "",
            _headline(trial["points"]),
        )
    console.print(table)
    for host in document.get("hosts", []):
        if host.get("set_aside"):
            console.print(f"{host['name']} set aside: {host['set_aside']}", markup=False)


def run(args: argparse.Namespace) -> int:
    try:
        if args.db:
            document = asyncio.run(_from_store(args.db, args.sweep))
        else:
            response = call(socket_path(args.socket), "GET", sweep_url(args.sweep, "/results"))
            if not response.ok:
                if args.json:
                    emit_json(response.document)
                print(f"results {args.sweep}: {response.error}", file=sys.stderr)
                return response.exit_code()
            document = response.document
    except (BadInput, SweepNotFound) as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    except (DaemonUnreachable, StoreError) as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        emit_json(document)
    else:
        print_results(document, Console())
    return EXIT_OK
