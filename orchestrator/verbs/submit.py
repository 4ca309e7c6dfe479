"""Queue a sweep file on the daemon (the same file twice is recognised, not run twice)."""

from __future__ import annotations

import argparse
import os
import sys

from orchestrator.sweepfile import SweepFileError, read_sweep_text
from orchestrator.verbs.apiclient import DaemonUnreachable, add_socket_argument, call, socket_path
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, emit_json


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the sweep file (YAML)")
    parser.add_argument(
        "--replace",
        action="store_true",
        help="supersede a sweep of this name with other content (its results stay)",
    )
    parser.add_argument("--json", action="store_true", help="the daemon's answer as JSON")
    add_socket_argument(parser)


def run(args: argparse.Namespace) -> int:
    try:
        text = read_sweep_text(args.file)
    except SweepFileError as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        response = call(
            socket_path(args.socket),
            "POST",
            "/sweeps",
            body=text.encode("utf-8"),
            params={"replace": "1"} if args.replace else None,
            headers={
                "Content-Type": "application/yaml",
                "X-Sweep-Filename": os.path.basename(args.file),
            },
        )
    except DaemonUnreachable as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        emit_json(response.document)
    document = response.document if isinstance(response.document, dict) else {}
    if response.ok:
        verb = "queued" if document.get("created") else "already submitted"
        print(
            f"sweep {document.get('name')} (id {document.get('id')}): {verb}, "
            f"state {document.get('state')}",
            file=sys.stderr,
        )
    else:
        print(f"{args.file}: {response.error}", file=sys.stderr)
        for problem in document.get("problems", []):
            field = f" {problem['field']}:" if problem.get("field") else ""
            print(
                f"{problem['file']}:{problem['line']}:{field} {problem['message']}", file=sys.stderr
            )
    return response.exit_code()
