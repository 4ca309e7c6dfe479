"""Talking to the daemon's API over its unix socket, for the client verbs.

Which socket: ``--socket PATH``; else ``$ORCHESTRATOR_SOCKET``; else the system daemon's
``/var/lib/orchestrator/orchestrator.sock`` when it exists; else
``$XDG_RUNTIME_DIR/orchestrator.sock`` when ``$XDG_RUNTIME_DIR`` is set (a per-user daemon
started with ``--socket "$XDG_RUNTIME_DIR/orchestrator.sock"``); else the system path, so the
error names where the daemon was expected.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.types import valid_ref
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, BadInput, emit_json

SYSTEM_SOCKET = Path("/var/lib/orchestrator/orchestrator.sock")
SOCKET_ENV = "ORCHESTRATOR_SOCKET"
DEFAULT_TIMEOUT_S = 60.0


class DaemonUnreachable(Exception):
    """No daemon answered on the socket (not running, wrong path, no permission)."""

    def __init__(self, socket_path: Path, reason: str) -> None:
        super().__init__(
            f"no daemon answers on {socket_path}: {reason} (is `orchestrator daemon` running? "
            f"pass --socket PATH or set ${SOCKET_ENV})"
        )
        self.socket_path = socket_path
        self.reason = reason


class DaemonError(Exception):
    """The daemon's answer is an error, or no document of the kind asked for: what to say, and
    the exit status (a sweep it does not know: 2; its own failure: 1)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True, slots=True)
class ApiResponse:
    status: int
    document: Any
    text: str = ""
    """The body as sent (a report in its own format; JSON for every other answer)."""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def error(self) -> str:
        if isinstance(self.document, dict) and "error" in self.document:
            return str(self.document["error"])
        return f"HTTP {self.status}"

    def exit_code(self) -> int:
        """2 for what the caller got wrong (4xx), 1 for what went wrong in the daemon."""
        if self.ok:
            return EXIT_OK
        return EXIT_BAD_INPUT if 400 <= self.status < 500 else EXIT_FAILED


def default_socket(environ: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if environ is None else environ
    if env.get(SOCKET_ENV):
        return Path(env[SOCKET_ENV]).expanduser()
    if SYSTEM_SOCKET.exists():
        return SYSTEM_SOCKET
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return Path(runtime) / "orchestrator.sock"
    return SYSTEM_SOCKET


def socket_path(value: str | None) -> Path:
    return Path(value).expanduser() if value else default_socket()


def sweep_url(ref: str, tail: str = "") -> str:
    """``/sweeps/<ref><tail>``; a ref that is no name or id is the user's mistake (exit 2)."""
    if not valid_ref(ref):
        raise BadInput(f"{ref!r} is not a sweep name or id")
    return f"/sweeps/{ref}{tail}"


def add_socket_argument(parser: Any) -> None:
    parser.add_argument(
        "--socket",
        metavar="PATH",
        help=f"the daemon's socket (default: ${SOCKET_ENV}, else {SYSTEM_SOCKET}, "
        "else $XDG_RUNTIME_DIR/orchestrator.sock)",
    )


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over the daemon's unix socket: the standard library's client, because a client
    verb makes one request and the asyncio HTTP client cost each ``status`` or ``cancel`` a
    third of a CPU-second just to import."""

    def __init__(self, path: Path, timeout_s: float) -> None:
        super().__init__("orchestrator", timeout=timeout_s)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.path))
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def call(
    socket_file: Path,
    method: str,
    url_path: str,
    *,
    body: bytes | None = None,
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ApiResponse:
    """One request to the daemon; raises :class:`DaemonUnreachable` when nobody answers."""
    target = url_path + (f"?{urllib.parse.urlencode(params)}" if params else "")
    connection = _UnixConnection(socket_file, timeout_s)
    try:
        connection.request(method, target, body=body, headers=headers or {})
        response = connection.getresponse()
        status, text = response.status, response.read().decode("utf-8", errors="replace")
    except TimeoutError as exc:
        raise DaemonUnreachable(socket_file, f"no answer within {timeout_s:g}s") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise DaemonUnreachable(socket_file, str(exc) or type(exc).__name__) from exc
    finally:
        connection.close()
    try:
        document = json.loads(text) if text else None
    except json.JSONDecodeError:
        document = {"error": text[:500]}
    return ApiResponse(status, document, text)


def daemon_get(
    socket: str | None, ref: str, tail: str, params: dict[str, str] | None = None
) -> ApiResponse:
    """``GET /sweeps/<ref><tail>`` from the daemon on ``socket`` (``--socket``'s value);
    :class:`DaemonError` when it answers with an error."""
    response = call(socket_path(socket), "GET", sweep_url(ref, tail), params=params)
    if not response.ok:
        raise DaemonError(response.error, response.exit_code())
    return response


def ask_or_exit(
    socket: str | None,
    method: str,
    sweep: str | None,
    tail: str = "",
    *,
    params: dict[str, str] | None = None,
) -> ApiResponse | int:
    """``METHOD /sweeps/<sweep><tail>`` (``/sweeps`` when ``sweep`` is None) to the daemon on
    ``socket`` (``--socket``'s value): its answer, an error or not, or the exit status after
    saying on stderr why there is none: ``sweep`` is no name or id (2), no daemon answers (1)."""
    try:
        path = "/sweeps" if sweep is None else sweep_url(sweep, tail)
        return call(socket_path(socket), method, path, params=params)
    except BadInput as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    except DaemonUnreachable as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED


def post_to_sweep(args: Any, action: str, said: Callable[[dict[str, Any]], str]) -> int:
    """``POST /sweeps/{args.sweep}/{action}`` (cancel, resume): the daemon's answer as JSON with
    ``--json``, and in words (``said`` of the answer) on stderr; returns the exit status."""
    response = ask_or_exit(args.socket, "POST", args.sweep, f"/{action}")
    if isinstance(response, int):
        return response
    if args.json:
        emit_json(response.document)
    if response.ok:
        document = response.document
        print(f"sweep {document['name']} (id {document['id']}): {said(document)}", file=sys.stderr)
    else:
        print(f"{action} {args.sweep}: {response.error}", file=sys.stderr)
    return response.exit_code()
