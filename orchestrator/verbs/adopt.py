"""Install a sweep's winning config as a host type's lasting configuration.

Through the daemon's API by default; with ``--db PATH`` straight from a store file with no
daemon. Each host of the type gets the answer's named config (the one its headline names
first and its heatmap marks) in its own drop-in, proven like a trial's;
``orchestrator restore HOST`` puts the unit back as adopt found it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from orchestrator.daemon import HostClaims, ParsedSweeps
from orchestrator.daemon.adopt import AdoptRefused, adopt_sweep
from orchestrator.store import Store, StoreError, SweepNotFound
from orchestrator.types import valid_ref
from orchestrator.verbs.apiclient import (
    add_socket_argument,
    call,
    socket_path,
    sweep_url,
)
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, BadInput
from orchestrator.verbs.source import act_or_exit, store_without_daemon

ADOPT_TIMEOUT_S = 7200.0
"""One clean restart per host of the type, each minutes long on a real host."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", help="a sweep name (its latest run) or id")
    parser.add_argument("--type", required=True, dest="host_type", help="the host type to adopt on")
    parser.add_argument(
        "--allow-tie",
        action="store_true",
        help="on a tie, adopt the config the answer names first (first by rank, "
        "docs/answers.md), which is not always the one with the highest estimate",
    )
    parser.add_argument(
        "--allow-unexplored",
        action="store_true",
        help="adopt the best config found so far although the search left enough of the "
        "space unexplored that a better one may be there (the answer's exploration risk)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    source = parser.add_mutually_exclusive_group()
    add_socket_argument(source)
    source.add_argument(
        "--db", metavar="PATH", help="adopt from this store (a file or postgresql://...), no daemon"
    )


async def _from_store(
    path: Path | str, ref: str, host_type: str, allow_tie: bool, allow_unexplored: bool
) -> dict[str, Any]:
    async with await Store.open(path) as store:
        record = await store.get_sweep(ref)
        sweep = ParsedSweeps().get(record)
        adoption = await adopt_sweep(
            store,
            record,
            sweep,
            host_type,
            HostClaims(),
            allow_tie=allow_tie,
            allow_unexplored=allow_unexplored,
        )
    return adoption.to_json()


def _adopt_from_store(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    try:
        path = store_without_daemon(args.db, "adopt")
        document = asyncio.run(
            _from_store(path, args.sweep, args.host_type, args.allow_tie, args.allow_unexplored)
        )
    except (BadInput, AdoptRefused, SweepNotFound) as refused:
        return EXIT_BAD_INPUT, {"error": str(refused)}
    except StoreError as error:
        return EXIT_FAILED, {"error": str(error)}
    return (EXIT_OK if document["ok"] else EXIT_FAILED), document


def _adopt_through_daemon(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    body = {
        "type": args.host_type,
        "allow_tie": args.allow_tie,
        "allow_unexplored": args.allow_unexplored,
    }
    response = call(
        socket_path(args.socket),
        "POST",
        sweep_url(args.sweep, "/adopt"),
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        timeout_s=ADOPT_TIMEOUT_S,
    )
    document = response.document if isinstance(response.document, dict) else {}
    if "hosts" in document:
        return (EXIT_OK if document.get("ok") else EXIT_FAILED), document
    return response.exit_code(), {"error": response.error, **document}


def run(args: argparse.Namespace) -> int:
    if not valid_ref(args.sweep) or not valid_ref(args.host_type):
        print("adopt: the sweep and --type are names (letters, digits, . _ -)", file=sys.stderr)
        return EXIT_BAD_INPUT
    done = act_or_exit(args, _adopt_from_store, _adopt_through_daemon)
    if done is None:
        return EXIT_FAILED
    code, document = done
    if "hosts" not in document:
        print(f"adopt: {document.get('error')}", file=sys.stderr)
        return code
    print(f"adopting {document['label']} on {document['host_type']}:", file=sys.stderr)
    for host in document["hosts"]:
        what = f"adopted ({host['dropin']})" if host["ok"] else f"NOT adopted: {host['error']}"
        print(f"  {host['host']}: {what}", file=sys.stderr)
    if document["ok"]:
        print("undo with: orchestrator restore HOST", file=sys.stderr)
    return code
