"""Show the daemon's sweeps (queued, running, ended) and what each host is doing."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from orchestrator.verbs.apiclient import (
    DaemonUnreachable,
    add_socket_argument,
    call,
    socket_path,
    sweep_url,
)
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, BadInput, emit_json


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", nargs="?", help="one sweep (name or id) in detail")
    parser.add_argument("--all", action="store_true", help="include replaced sweeps")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_socket_argument(parser)


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return dt.datetime.fromtimestamp(stamp).strftime("%m-%d %H:%M")


def print_sweeps(sweeps: list[dict[str, Any]], console: Console) -> None:
    table = Table(title=f"{len(sweeps)} sweep(s)")
    for column in ("id", "name", "state", "priority", "submitted", "started", "finished"):
        table.add_column(column)
    for sweep in sweeps:
        state = sweep["state"] + (f" (stopping: {sweep['stopping']})" if sweep["stopping"] else "")
        table.add_row(
            str(sweep["id"]),
            sweep["name"],
            state,
            str(sweep["priority"]),
            _when(sweep["submitted_at"]),
            _when(sweep["started_at"]),
            _when(sweep["finished_at"]),
        )
    console.print(table)


def print_sweep(sweep: dict[str, Any], console: Console) -> None:
    trials = ", ".join(f"{n} {s}" for s, n in sorted(sweep["trials"].items())) or "none yet"
    console.print(f"sweep {sweep['name']} (id {sweep['id']}): {sweep['state']}; trials: {trials}")
    why = (sweep.get("summary") or {}).get("error")
    if why:
        console.print(f"  {why}", markup=False, highlight=False)
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
    try:
        path = sweep_url(args.sweep) if args.sweep else "/sweeps"
        response = call(
            socket_path(args.socket), "GET", path, params={"all": "1"} if args.all else None
        )
    except BadInput as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    except DaemonUnreachable as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
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
