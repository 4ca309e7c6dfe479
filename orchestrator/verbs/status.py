"""Show the daemon's sweeps (queued, running, ended), a running sweep's progress and ETA, and
what each host is doing."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

from rich.console import Console

from orchestrator.progress.snapshot import ProgressSnapshot, clock_time
from orchestrator.verbs.apiclient import add_socket_argument, ask_or_exit
from orchestrator.verbs.common import emit_json


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", nargs="?", help="one sweep (name or id) in detail")
    parser.add_argument("--all", action="store_true", help="include replaced sweeps")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_socket_argument(parser)


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return dt.datetime.fromtimestamp(stamp).strftime("%m-%d %H:%M")


def progress_words(sweep: dict[str, Any]) -> str:
    """A running sweep's ``restarts 3/12 (h200); ETA 03:12:00 (in 41m...)``; ``-`` otherwise."""
    snapshot = _snapshot(sweep)
    if snapshot is None:
        return "-"
    return f"{snapshot.done_words()}; {snapshot.eta_words(clock_time)}"


def _snapshot(sweep: dict[str, Any]) -> ProgressSnapshot | None:
    """The sweep's progress, if the daemon sent one this client can read."""
    document = sweep.get("progress")
    if not isinstance(document, dict):
        return None
    try:
        return ProgressSnapshot.from_json(document)
    except (KeyError, TypeError, ValueError):  # a newer daemon's shape: show none, not a guess
        return None


def print_sweeps(sweeps: list[dict[str, Any]], console: Console) -> None:
    """A few lines per sweep: its id, whole name and state, then its times, then a running
    sweep's progress. Lines, not a table: a table at 80 columns cut a long name to a prefix
    two sweeps could share; a line keeps it whole and wraps what follows it."""
    console.print(f"{len(sweeps)} sweep(s)", highlight=False)
    width = max((len(str(sweep["id"])) for sweep in sweeps), default=1)
    indent = " " * (width + 2)
    for sweep in sweeps:
        state = sweep["state"] + (f" (stopping: {sweep['stopping']})" if sweep["stopping"] else "")
        if sweep.get("daemon"):  # a store several daemons share: which one runs it
            state += f" on {sweep['daemon']}"
        times = [
            f"{word} {_when(sweep[key])}"
            for word, key in (
                ("submitted", "submitted_at"),
                ("started", "started_at"),
                ("finished", "finished_at"),
            )
            if sweep[key] is not None
        ]
        lines = [
            f"{sweep['id']:>{width}}  {sweep['name']}: {state} (priority {sweep['priority']})",
            indent + ", ".join(times),
        ]
        if _snapshot(sweep) is not None:
            lines.append(indent + progress_words(sweep))
        for line in lines:
            console.print(line, markup=False, highlight=False)


def print_sweep(sweep: dict[str, Any], console: Console) -> None:
    trials = ", ".join(f"{n} {s}" for s, n in sorted(sweep["trials"].items())) or "none yet"
    runner = f" on {sweep['daemon']}" if sweep.get("daemon") else ""
    console.print(
        f"sweep {sweep['name']} (id {sweep['id']}): {sweep['state']}{runner}; trials: {trials}"
    )
    why = (sweep.get("summary") or {}).get("error")
    if why:
        console.print(f"  {why}", markup=False, highlight=False)
    snapshot = _snapshot(sweep)
    if snapshot is not None:
        by = snapshot.best_by.words()
        for line in (
            f"progress: {snapshot.done_words()}; {snapshot.eta_words(clock_time)}",
            f"best so far{f' ({by})' if by else ''}: {snapshot.best_words()}",
        ):
            console.print(f"  {line}", markup=False, highlight=False)
    for host in sweep["hosts"]:
        current = host["current"] or {}
        if host["set_aside"]:
            doing = f"set aside: {host['set_aside']}"
        elif current:
            counted = f" {current['done']}/{current['total']}" if "total" in current else ""
            config = current.get("config") or "-"  # by its knob values, never the trial key
            doing = f"{config} {current.get('step', '')}{counted}"
        else:
            doing = "-"
        console.print(f"  {host['name']}: {doing}", markup=False, highlight=False)


def run(args: argparse.Namespace) -> int:
    response = ask_or_exit(
        args.socket, "GET", args.sweep or None, params={"all": "1"} if args.all else None
    )
    if isinstance(response, int):
        return response
    if not response.ok:
        if args.json:
            emit_json(response.document)
        print(f"status: {response.error}", file=sys.stderr)
        return response.exit_code()
    if args.json:
        emit_json(response.document)
    elif args.sweep:
        print_sweep(response.document, Console())
    else:
        print_sweeps(response.document["sweeps"], Console())
    return response.exit_code()
