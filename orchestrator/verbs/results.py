"""Show a sweep's results, from the daemon or straight from a store file (--db)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from orchestrator.answers import AnsweredResults, answered_from_text
from orchestrator.report.model import shared_knobs, short_labels
from orchestrator.store import Store, StoreError, SweepNotFound, SweepResults, TrialOutcome
from orchestrator.store.results import config_label
from orchestrator.verbs.apiclient import add_socket_argument, ask_or_exit
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, emit_json


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", help="a sweep name (its latest run) or id")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    source = parser.add_mutually_exclusive_group()
    add_socket_argument(source)
    source.add_argument(
        "--db", metavar="PATH", help="read this store (a file or postgresql://...), not a daemon"
    )


async def _from_store(path: str, ref: str) -> AnsweredResults:
    """The results with their answers, drawn from the sweep file stored with them."""
    async with await Store.open(path) as store:
        results = await store.results(ref)
        record = await store.get_sweep(results.id)
    return answered_from_text(results, record.yaml_text, f"sweep {record.name} (id {record.id})")


def headline(trial: TrialOutcome) -> str:
    """What one attempt measured: ``4 cells, coding 3/4 pass`` (short words: the column is
    narrow at 80 columns)."""
    parts = []
    if trial.throughput:
        parts.append(f"{len(trial.throughput)} cells")
    if trial.coding:
        passed = sum(1 for point in trial.coding if point.passed)
        parts.append(f"coding {passed}/{len(trial.coding)} pass")
    return ", ".join(parts) or "-"


def print_results(results: SweepResults, console: Console) -> None:
    """One row per attempt: the config by the knobs that vary across the sweep (those every
    config shares are said once, above), its host, why it ran (``purpose``: measure, screen,
    confirm) and which measurement of the config on its host type it is (``repeat``), the
    attempt, how it ended and what it measured. Readable at 80 columns: the small columns
    never wrap; the config and what follows wrap at spaces, a knob never cut in two."""
    configs = [trial.config for trial in results.trials]
    shared = shared_knobs(configs)
    console.print(
        f"sweep {results.sweep} (id {results.id}): {results.state}", markup=False, highlight=False
    )
    if shared:
        console.print(f"every config: {config_label(shared)}", markup=False, highlight=False)
    labels = short_labels(configs)
    rows = [_row(trial, label) for trial, label in zip(results.trials, labels, strict=True)]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    widths = _widths(rows, console.width - 2 * (len(_COLUMNS) - 1))
    for index, column in enumerate(_COLUMNS):
        wraps = index in _WRAPPING
        table.add_column(
            column,
            no_wrap=not wraps,
            width=widths[index] if wraps else None,
            overflow="fold" if wraps else "ellipsis",
        )
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # plain text, never rich markup
    console.print(table)
    for host in results.hosts:
        if host.set_aside:
            console.print(f"{host.name} set aside: {host.set_aside}", markup=False)


_COLUMNS = ("config", "host", "purpose", "repeat", "attempt", "state", "points")
_WRAPPING = (0, 5, 6)
"""The columns that wrap (config, state, points), in the order they get room beyond their
widest word; the others are short and never wrap."""


def _widths(rows: Sequence[tuple[str, ...]], room: int) -> list[int | None]:
    """Each wrapping column's width: its widest word (a knob such as ``budget=12``, a cause)
    at least, so it wraps at spaces and never cuts a word, then what ``room`` has left, in
    :data:`_WRAPPING` order. None where even the widest words do not fit (rich decides)."""
    cells = [[column, *(row[index] for row in rows)] for index, column in enumerate(_COLUMNS)]
    natural = [max(len(cell) for cell in column) for column in cells]
    widths: list[int | None] = [None] * len(_COLUMNS)
    left = room - sum(natural[i] for i in range(len(_COLUMNS)) if i not in _WRAPPING)
    for index in _WRAPPING:
        widths[index] = max(len(word) for cell in cells[index] for word in cell.split())
        left -= widths[index] or 0
    if left < 0:
        return [None] * len(_COLUMNS)
    for index in _WRAPPING:
        grow = min(left, natural[index] - (widths[index] or 0))
        widths[index] = (widths[index] or 0) + grow
        left -= grow
    return widths


def _row(trial: TrialOutcome, label: str) -> tuple[str, ...]:
    plan = trial.plan
    return (
        label,
        trial.host,
        "-" if plan is None else plan.purpose,
        "-" if plan is None else str(plan.repeat),
        "-" if trial.attempt is None else str(trial.attempt),
        f"{trial.state}: {trial.cause}" if trial.cause else trial.state,
        headline(trial),
    )


def _decode(document: dict[str, Any]) -> SweepResults | None:
    try:
        return SweepResults.from_json(document)
    except (KeyError, TypeError, ValueError):
        return None


def _from_daemon(args: argparse.Namespace) -> SweepResults | int:
    """The results the daemon sends, or the exit status after saying why none came (with
    ``--json``, the daemon's document as it sent it, which a newer one may add keys to; then
    the exit status, 0 when it was no error)."""
    response = ask_or_exit(args.socket, "GET", args.sweep, "/results")
    if isinstance(response, int):
        return response
    if args.json:
        emit_json(response.document)
    if not response.ok:
        print(f"results {args.sweep}: {response.error}", file=sys.stderr)
    if args.json or not response.ok:
        return response.exit_code()
    decoded = _decode(response.document)
    if decoded is None:
        print(f"results {args.sweep}: the daemon's answer is no results document", file=sys.stderr)
        return EXIT_FAILED
    return decoded


def run(args: argparse.Namespace) -> int:
    if args.db:
        try:
            document = asyncio.run(_from_store(args.db, args.sweep))
        except StoreError as error:  # no such sweep: the user's mistake
            print(error, file=sys.stderr)
            return EXIT_BAD_INPUT if isinstance(error, SweepNotFound) else EXIT_FAILED
        if args.json:
            emit_json(document.to_json())
            return EXIT_OK
        results = document.results
    else:
        decoded = _from_daemon(args)
        if isinstance(decoded, int):
            return decoded
        results = decoded
    if args.json:
        emit_json(results.to_json())
    else:
        print_results(results, Console())
    return EXIT_OK
