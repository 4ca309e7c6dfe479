"""Cancel a sweep: it stops at the next safe step and its hosts are restored."""

from __future__ import annotations

import argparse
import sys

from orchestrator.verbs.apiclient import (
    DaemonUnreachable,
    add_socket_argument,
    call,
    socket_path,
    sweep_url,
)
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, BadInput, emit_json


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", help="a sweep name (its latest run) or id")
    parser.add_argument("--json", action="store_true", help="the daemon's answer as JSON")
    add_socket_argument(parser)


def run(args: argparse.Namespace) -> int:
    try:
        response = call(socket_path(args.socket), "POST", sweep_url(args.sweep, "/cancel"))
    except BadInput as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    except DaemonUnreachable as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        emit_json(response.document)
    if response.ok:
        document = response.document
        what = (
            "stopping at the next safe step, then restoring its hosts"
            if document.get("cancelling")
            else document.get("state")
        )
        print(f"sweep {document['name']} (id {document['id']}): {what}", file=sys.stderr)
    else:
        print(f"cancel {args.sweep}: {response.error}", file=sys.stderr)
    return response.exit_code()
