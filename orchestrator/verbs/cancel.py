"""Cancel a sweep: it stops at the next safe step and its hosts are restored."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.verbs.apiclient import add_socket_argument, post_to_sweep


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", help="a sweep name (its latest run) or id")
    parser.add_argument("--json", action="store_true", help="the daemon's answer as JSON")
    add_socket_argument(parser)


def _said(document: dict[str, Any]) -> str:
    if document.get("cancelling"):
        return "stopping at the next safe step, then restoring its hosts"
    return str(document.get("state"))


def run(args: argparse.Namespace) -> int:
    return post_to_sweep(args, "cancel", _said)
