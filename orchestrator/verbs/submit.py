"""Queue a sweep file on the daemon (the same file twice is recognised, not run twice).

The file and its workload files are checked here first, so a bad line is reported with its
number and nothing is queued; the workload files' content travels with the sweep."""

from __future__ import annotations

import argparse
import os
import sys

from orchestrator.submission import SubmitBody
from orchestrator.sweepfile import CheckedSweep, SweepFileError, check_sweep
from orchestrator.verbs.apiclient import DaemonUnreachable, add_socket_argument, call, socket_path
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, emit_json, report_problems


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the sweep file (YAML)")
    parser.add_argument(
        "--replace",
        action="store_true",
        help="supersede a sweep of this name with other content (its results stay)",
    )
    parser.add_argument("--json", action="store_true", help="the daemon's answer as JSON")
    add_socket_argument(parser)


def _request(path: str, checked: CheckedSweep) -> tuple[bytes, dict[str, str]]:
    """The body and headers: the YAML as it is, or, when the sweep names workload files,
    JSON carrying their content (the daemon reads nothing from this machine's disk)."""
    filename = os.path.basename(path)
    files = checked.sweep.benchmark.workload_files()
    if not files:
        headers = {"Content-Type": "application/yaml", "X-Sweep-Filename": filename}
        return checked.text.encode("utf-8"), headers
    body = SubmitBody(sweep=checked.text, filename=filename, workloads=files)
    return body.model_dump_json().encode("utf-8"), {"Content-Type": "application/json"}


def run(args: argparse.Namespace) -> int:
    try:
        checked = check_sweep(args.file)
    except SweepFileError as error:
        report_problems(error)  # nothing is sent: a bad sweep or workload line is not queued
        return EXIT_BAD_INPUT
    body, headers = _request(args.file, checked)
    try:
        response = call(
            socket_path(args.socket),
            "POST",
            "/sweeps",
            body=body,
            params={"replace": "1"} if args.replace else None,
            headers=headers,
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
