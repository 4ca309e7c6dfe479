"""Put hosts back as their sweeps found them (one host, or every host not yet restored).

Through the daemon's API by default; with ``--db PATH`` straight from a store file, with no
daemon (a foreground ``run`` that died, a store copied from another machine). Both go through
the same :func:`orchestrator.daemon.restore_host`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from orchestrator.store import Store, StoreError
from orchestrator.types import valid_ref
from orchestrator.verbs.apiclient import add_socket_argument, call, socket_path
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, BadInput
from orchestrator.verbs.source import act_or_exit, store_without_daemon

RESTORE_TIMEOUT_S = 3600.0
"""A restore restarts the unit and waits for readiness: minutes on a real host."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("host", nargs="?", help="the host's name in its sweep file")
    which.add_argument("--all", action="store_true", help="every host not yet restored")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument(
        "--force",
        action="store_true",
        help="also remove another sweep's trial drop-in found in ours' place (else reported)",
    )
    source = parser.add_mutually_exclusive_group()
    add_socket_argument(source)
    source.add_argument(
        "--db",
        metavar="PATH",
        help="restore from this store (a file or postgresql://...), not through a daemon",
    )


async def _from_store(path: Path | str, host: str | None, force: bool) -> dict[str, Any]:
    """The restore without a daemon: each host's lease says whether another controller holds
    it (then it is refused, naming the holder)."""
    from orchestrator.daemon import HostClaims, ParsedSweeps, Restorer

    async with await Store.open(path) as store:
        restorer = Restorer(store, ParsedSweeps(), HostClaims())
        outcomes = await restorer.restore_hosts(host, force=force)
    return {"restored": [outcome.to_json() for outcome in outcomes]}


def _restore_from_store(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    # Imported here: the daemon's restore path (the lifecycle, SSH, the runner's parts) costs a
    # second to load, and a restore through a running daemon is only an API call.
    from orchestrator.daemon import UnknownHost

    try:
        path = store_without_daemon(args.db, "restore")
        host = None if args.all else args.host
        return EXIT_OK, asyncio.run(_from_store(path, host, args.force))
    except (BadInput, UnknownHost) as error:
        return EXIT_BAD_INPUT, {"error": str(error)}
    except StoreError as error:
        return EXIT_FAILED, {"error": str(error)}


def _restore_through_daemon(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {"all": True} if args.all else {"host": args.host}
    if args.force:
        body["force"] = True
    response = call(
        socket_path(args.socket),
        "POST",
        "/restore",
        body=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        timeout_s=RESTORE_TIMEOUT_S,
    )
    document = response.document if isinstance(response.document, dict) else {}
    if not response.ok:
        return response.exit_code(), {"error": response.error, **document}
    return EXIT_OK, document


def run(args: argparse.Namespace) -> int:
    if args.host is not None and not valid_ref(args.host):
        print(f"{args.host!r} is not a host name", file=sys.stderr)
        return EXIT_BAD_INPUT
    done = act_or_exit(args, _restore_from_store, _restore_through_daemon)
    if done is None:
        return EXIT_FAILED
    code, document = done
    if code != EXIT_OK:
        print(f"restore: {document['error']}", file=sys.stderr)
        return code
    outcomes = document["restored"]
    if not outcomes:
        print("nothing to restore: every backed-up host is already restored", file=sys.stderr)
    for outcome in outcomes:
        what = "restored" if outcome["ok"] else f"NOT restored: {outcome['error']}"
        print(f"{outcome['host']} (sweep {outcome['sweep']}): {what}", file=sys.stderr)
        for change in outcome.get("foreign_changes") or []:
            whose = f"sweep '{change['sweep']}'" if change["sweep"] else "someone else"
            left = " (left alone: --force removes it)" if change["sweep"] else ""
            print(f"  {change['path']}: written by {whose}{left}", file=sys.stderr)
    return EXIT_OK if all(o["ok"] for o in outcomes) else EXIT_FAILED
