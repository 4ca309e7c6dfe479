"""Put hosts back as their sweeps found them (one host, or every host not yet restored)."""

from __future__ import annotations

import argparse
import json
import sys

from orchestrator.api import valid_ref
from orchestrator.verbs.apiclient import DaemonUnreachable, add_socket_argument, call, socket_path
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, emit_json

RESTORE_TIMEOUT_S = 3600.0
"""A restore restarts the unit and waits for readiness: minutes on a real host."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("host", nargs="?", help="the host's name in its sweep file")
    which.add_argument("--all", action="store_true", help="every host not yet restored")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_socket_argument(parser)


def run(args: argparse.Namespace) -> int:
    if args.host is not None and not valid_ref(args.host):
        print(f"{args.host!r} is not a host name", file=sys.stderr)
        return EXIT_BAD_INPUT
    body = {"all": True} if args.all else {"host": args.host}
    try:
        response = call(
            socket_path(args.socket),
            "POST",
            "/restore",
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            timeout_s=RESTORE_TIMEOUT_S,
        )
    except DaemonUnreachable as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        emit_json(response.document)
    if not response.ok:
        print(f"restore: {response.error}", file=sys.stderr)
        return response.exit_code()
    outcomes = response.document["restored"]
    if not outcomes:
        print("nothing to restore: every backed-up host is already restored", file=sys.stderr)
    for outcome in outcomes:
        what = "restored" if outcome["ok"] else f"NOT restored: {outcome['error']}"
        print(f"{outcome['host']} (sweep {outcome['sweep']}): {what}", file=sys.stderr)
    return EXIT_OK if all(o["ok"] for o in outcomes) else EXIT_FAILED
