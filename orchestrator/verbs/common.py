"""What every verb shares: exit codes, JSON on stdout, problems on stderr, the store's path
(or a PostgreSQL store's URL)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.store import default_db_path, is_postgres_url
from orchestrator.store.postgres import without_password
from orchestrator.types import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from orchestrator.sweepfile import Sweep, SweepFileError

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK"]



class BadInput(Exception):
    """The user's input is wrong; the verb exits 2 after printing the message."""


def emit_json(document: Any) -> None:
    """Exactly one JSON document on stdout (scripts pipe it into a parser)."""
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()


def report_problems(error: SweepFileError) -> None:
    """Every problem of a sweep file on stderr, one line each (``file:line: field: message``)."""
    for problem in error.problems:
        print(problem, file=sys.stderr)


def print_warnings(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def load_sweep_or_raise(path: str) -> tuple[Sweep, str]:
    # Imported here: the sweep file's schema takes 0.4 s to build, and the verbs that only talk
    # to the daemon (status, cancel, results) never read a sweep file.
    from orchestrator.sweepfile import SweepFileError, load_sweep_with_text

    try:
        return load_sweep_with_text(path)
    except SweepFileError as error:
        raise BadInput("\n".join(str(p) for p in error.problems)) from error
    except OSError as error:
        raise BadInput(f"{path}: {error.strerror or error}") from error


def db_path(value: str | None) -> Path | str:
    """``--db PATH`` (a SQLite file) or ``--db postgresql://...`` (a PostgreSQL store, as
    given), else ``$XDG_STATE_HOME/orchestrator/orchestrator.db``."""
    if value and is_postgres_url(value):
        return value
    return Path(value).expanduser() if value else default_db_path()


def missing_store(target: Path | str) -> str | None:
    """Why there is no store to read at ``target`` (a file that does not exist), else None; a
    PostgreSQL store is tried when it is opened."""
    if isinstance(target, Path) and not target.exists():
        return (
            f"{target}: no such store (run a sweep first, pass --db, or --socket for the "
            "daemon's)"
        )
    return None


def shown_db(value: str) -> str:
    """``--db``'s value as a verb may print it (in a command to run next): a URL's password
    shown as ``***``."""
    return without_password(value) if is_postgres_url(value) else value


def add_db_argument(parser: Any) -> None:
    parser.add_argument(
        "--db",
        metavar="PATH",
        help="the store: a file, or postgresql://... for a team's PostgreSQL store "
        "(default: $XDG_STATE_HOME/orchestrator/orchestrator.db)",
    )


def write_atomically(path: Path, text: str) -> None:
    """A reader (a browser refreshing, a CI artefact upload, a tool watching a directory)
    never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
