"""Where a verb finds a sweep's store: ``--db`` (a store file or a PostgreSQL URL), or the
daemon's store through its API (``--socket``). The verbs that read a sweep (``report``,
``export``) read either, and end the same way when they cannot (what the user got wrong: 2,
else 1); the verbs that change hosts (``adopt``, ``restore``) write a store directly only where
no daemon runs on it."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.store import Store, StoreError, SweepNotFound, is_postgres_url
from orchestrator.verbs.apiclient import DaemonError, DaemonUnreachable, add_socket_argument
from orchestrator.verbs.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    BadInput,
    add_db_argument,
    db_path,
    emit_json,
    missing_store,
)

T = TypeVar("T")


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--db`` or ``--socket``, not both."""
    source = parser.add_mutually_exclusive_group()
    add_db_argument(source)
    add_socket_argument(source)


@contextlib.asynccontextmanager
async def open_store(value: str | None) -> AsyncIterator[Store]:
    """The store ``--db`` names (``value``), else the default one, opened to read;
    FileNotFoundError saying so when it names no file (a read never creates a store)."""
    path = db_path(value)
    missing = missing_store(path)
    if missing is not None:
        raise FileNotFoundError(missing)
    async with await Store.open(path) as store:
        yield store


def read_or_exit(verb: str, read: Callable[[], T]) -> T | int:
    """What ``read`` returns, or the exit status after saying on stderr (``verb: why``) why
    it read nothing: no such sweep, store or daemon answer (2, or the daemon's own status),
    no daemon on the socket (1)."""
    try:
        return read()
    except (SweepNotFound, BadInput, FileNotFoundError, StoreError) as error:
        print(f"{verb}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (DaemonError, DaemonUnreachable) as error:
        print(f"{verb}: {error}", file=sys.stderr)
        return error.exit_code if isinstance(error, DaemonError) else EXIT_FAILED


def store_without_daemon(db: str, verb: str) -> Path | str:
    """``--db``'s store for a verb that changes hosts with no daemon (``adopt``, ``restore``):
    a PostgreSQL URL as given (the daemons' own, shared: each host's lease arbitrates there),
    else the file, which must exist and have no daemon running on its directory; BadInput
    saying why not (``verb`` through the daemon instead)."""
    # Imported here: the daemon package costs a second to load, and a verb through a running
    # daemon is only an API call.
    from orchestrator.daemon import daemon_holds

    if is_postgres_url(db):
        return db
    path = Path(db).expanduser().absolute()
    if not path.is_file():
        raise BadInput(f"{path}: no such store")
    if daemon_holds(path.parent):
        raise BadInput(f"a daemon runs on {path.parent}: {verb} through it (without --db)")
    return path


def act_or_exit(
    args: argparse.Namespace,
    on_store: Callable[[argparse.Namespace], tuple[int, dict[str, Any]]],
    through_daemon: Callable[[argparse.Namespace], tuple[int, dict[str, Any]]],
) -> tuple[int, dict[str, Any]] | None:
    """A verb that changes hosts, done on the store ``--db`` names or else through the daemon:
    its exit status and document (on stdout with ``--json``), or None after saying on stderr
    that no daemon answered (the verb exits 1)."""
    try:
        code, document = on_store(args) if args.db is not None else through_daemon(args)
    except DaemonUnreachable as error:
        print(error, file=sys.stderr)
        return None
    if args.json:
        emit_json(document)
    return code, document
