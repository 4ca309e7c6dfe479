"""Continue an interrupted sweep through the daemon: what it measured is kept, the rest runs."""

from __future__ import annotations

import argparse

from orchestrator.verbs.apiclient import add_socket_argument, post_to_sweep


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", help="an interrupted sweep's name (its latest run) or id")
    parser.add_argument("--json", action="store_true", help="the daemon's answer as JSON")
    add_socket_argument(parser)


def run(args: argparse.Namespace) -> int:
    return post_to_sweep(
        args, "resume", lambda document: "queued to continue; what it measured is kept"
    )
